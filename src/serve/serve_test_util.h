// Copyright kvserve authors. Helpers for the serve tests: a small random
// model, a profile table of real presets, an in-process prefill + decode
// pair over real TCP (optionally through fault-injecting transports), and
// the single-process reference generation.
#ifndef KVSERVE_SERVE_SERVE_TEST_UTIL_H_
#define KVSERVE_SERVE_SERVE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kvserve/controller.h"
#include "kvserve/runtime.h"
#include "kvserve/serve.h"
#include "runtime/test_model_util.h"
#include "transport/transport_test_util.h"

namespace kvserve::servetest {

using transporttest::Kind;

// A fresh temp directory, removed when the test process exits.
inline std::string TempDir(const std::string& tag) {
  return kvserve::testing::TempDir("serve_" + tag);
}

// A Qwen2-family random model: 4 layers, 4 KV heads of 16 dims (2 KiB of
// f32 KV per token), vocabulary 211.
inline RandomModelSpec SmallSpec(uint64_t seed = 11) {
  RandomModelSpec s;
  s.family = "qwen2";
  s.vocab = 211;
  s.hidden = 64;
  s.intermediate = 96;
  s.layers = 4;
  s.heads = 4;
  s.kv_heads = 4;
  s.seed = seed;
  return s;
}

// Loads (writing once per process) the small model.
inline const Model& SmallModel() {
  static std::unique_ptr<Model> model = [] {
    const std::string dir = TempDir("model");
    EXPECT_TRUE(WriteRandomModel(dir, SmallSpec()).ok());
    auto m = Model::Load(dir, {.threads = 1});
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return std::move(*m);
  }();
  return *model;
}

// A table of real presets with made-up speeds and qualities (the tests
// check floors against it, not speeds).
inline ProfileTable TestTable() {
  std::vector<ProfileCost> rows;
  auto row = [&](const char* spec, double cr, double enc, double chat, double code) {
    ProfileCost p;
    p.spec = spec;
    p.compression_ratio = cr;
    p.encode_bytes_per_second = enc;
    p.decode_bytes_per_second = enc * 1.5;
    p.overhead_seconds = 1e-4;
    p.quality = {{"chat", chat}, {"code", code}};
    rows.push_back(p);
  };
  row("kivi-4", 6.0, 4e8, 0.995, 0.99);
  row("kivi-2", 10.0, 4e8, 0.97, 0.95);
  row("cachegen", 11.0, 1e8, 0.96, 0.94);
  return ProfileTable::FromRows(rows).value();
}

inline std::vector<int32_t> RandomPrompt(std::mt19937_64& rng, int min_tokens, int max_tokens) {
  std::uniform_int_distribution<int> len(min_tokens, max_tokens);
  std::vector<int32_t> p(len(rng));
  for (auto& t : p) t = static_cast<int32_t>(rng() % SmallSpec().vocab);
  return p;
}

// A request of `prompt` that uses the pool, forced to the raw profile, 6
// new tokens; greedy for even ids, else sampled (seeded from `rng`).
inline ServeRequest PoolRequest(uint64_t id, std::vector<int32_t> prompt, std::mt19937_64& rng) {
  ServeRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_new_tokens = 6;
  r.method = "none";
  r.use_pool = true;
  r.sampling.temperature = (id % 2 == 0) ? 0.0f : 0.8f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = rng();
  return r;
}

// The small model's runtime engine, for test engines that override one call.
class RuntimeEngineWrapper : public ServingEngine {
 public:
  RuntimeEngineWrapper() : inner_(NewRuntimeEngine(&SmallModel())) {}
  const EngineInfo& info() const override { return inner_->info(); }
  Result<EnginePrefill> Prefill(std::span<const int32_t> prompt, const LayerReadyCallback& on_layer) override {
    return inner_->Prefill(prompt, on_layer);
  }
  Result<std::unique_ptr<EngineKv>> AllocateKv(const KvShape& shape, DType dtype) override {
    return inner_->AllocateKv(shape, dtype);
  }
  Result<EngineTokens> Generate(std::vector<std::unique_ptr<EngineKv>> parts,
                                const std::vector<std::vector<uint8_t>>& keep_masks,
                                const EngineGenerate& request) override {
    return inner_->Generate(std::move(parts), keep_masks, request);
  }

 private:
  std::unique_ptr<ServingEngine> inner_;
};

// Submits `r` twice through `client`: the first answer must miss the pool
// and the second hit it. Both answers, or nullopt (a test failure recorded)
// when either failed.
struct MissAndHit {
  ServeResponse miss;
  ServeResponse hit;
};
inline std::optional<MissAndHit> SubmitMissThenHit(ServeClient& client, const ServeRequest& r) {
  MissAndHit out;
  for (ServeResponse* into : {&out.miss, &out.hit}) {
    auto answer = client.Submit(r);
    EXPECT_TRUE(answer.ok()) << answer.status().ToString();
    if (!answer.ok()) return std::nullopt;
    EXPECT_TRUE(answer->status.ok()) << answer->status.ToString();
    if (!answer->status.ok()) return std::nullopt;
    *into = std::move(*answer);
  }
  EXPECT_FALSE(out.miss.timings.prefix_hit);
  EXPECT_TRUE(out.hit.timings.prefix_hit);
  return out;
}

// What one process running prefill and decode back to back generates.
inline std::vector<int32_t> Reference(const Model& model, const ServeRequest& r) {
  auto prefill = model.Prefill(r.prompt);
  EXPECT_TRUE(prefill.ok());
  Sampler sampler(r.sampling);
  auto tokens = Generate(model, &prefill->kv, prefill->logits, r.max_new_tokens, &sampler,
                         r.stop_at_eos);
  EXPECT_TRUE(tokens.ok());
  return *tokens;
}

inline ConnectionOptions Options(const std::string& secret, const std::string& id) {
  ConnectionOptions o;
  o.secret = secret;
  o.local_id = id;
  o.io_timeout_seconds = 10;
  o.handshake_timeout_seconds = 5;
  o.max_message_bytes = 64 << 20;
  return o;
}

// The serve tests run over every network transport.
class OverTransports : public ::testing::TestWithParam<Kind> {};

#define KVSERVE_SERVE_OVER_TRANSPORTS(suite)                                              \
  INSTANTIATE_TEST_SUITE_P(Transports, suite,                                            \
                           ::testing::ValuesIn(::kvserve::transporttest::NetworkKinds()), \
                           ::kvserve::transporttest::KindName)

// A decode worker and a prefill worker on 127.0.0.1 over `decode_transport`
// (the decode worker listens on it) and `prefill_transport` (the prefill
// worker dials through it), and a client; both default to the cluster's own
// transport of the options' kind (TCP or UCX).
struct Cluster {
  std::unique_ptr<DecodeWorker> decode;
  std::unique_ptr<PrefillWorker> prefill;
  std::unique_ptr<ServeClient> client;
  std::unique_ptr<Transport> transport;
};

struct ClusterOptions {
  Kind kind = Kind::kTcp;                  // the cluster's own transport
  Transport* decode_transport = nullptr;   // default: the cluster's TCP
  Transport* prefill_transport = nullptr;  // default: the cluster's TCP
  std::string decode_secret = "pd-secret";
  std::string prefill_secret = "pd-secret";  // what the prefill worker uses to dial
  std::vector<std::string> extra_decode_addresses;  // tried after the local one
  bool start_decode = true;
  int max_attempts = 3;
  double shape_bytes_per_second = 0;
  KvPool* pool = nullptr;
  KvPool* decode_pool = nullptr;  // DecodeWorkerOptions::pool (null: hits are relayed)
  std::vector<std::string> pool_store_profiles;
  // Small chunks, so that the tests' prompts of tens of tokens span several.
  int pool_chunk_tokens = 16;
  // PrefillWorkerOptions::overlap_prefill.
  bool overlap_prefill = true;
  // The prefill worker's profile table (default: TestTable()).
  std::optional<ProfileTable> table;
  // ControllerOptions::bandit (false: the analytical choice alone).
  bool bandit = true;
  // The workers' engines (not owned; default: the small model's runtime).
  ServingEngine* decode_engine = nullptr;
  ServingEngine* prefill_engine = nullptr;
  // PrefillWorkerOptions::max_decode_connections.
  int max_decode_connections = PrefillWorkerOptions{}.max_decode_connections;
  // PrefillWorkerOptions::shaped_rate_log_sigma (<= 0: the shaped rate is
  // not used before the first measurement).
  double shaped_rate_log_sigma = PrefillWorkerOptions{}.shaped_rate_log_sigma;
};

inline ClusterOptions Over(Kind kind) {
  ClusterOptions o;
  o.kind = kind;
  return o;
}

inline std::unique_ptr<Cluster> StartCluster(const ClusterOptions& o = {}) {
  auto c = std::make_unique<Cluster>();
  c->transport = transporttest::MakeTransport(o.kind);
  if (!c->transport) return nullptr;
  Transport* decode_transport = o.decode_transport ? o.decode_transport : c->transport.get();
  Transport* prefill_transport = o.prefill_transport ? o.prefill_transport : c->transport.get();
  std::vector<std::string> decode_addresses;
  if (o.start_decode) {
    DecodeWorkerOptions d;
    d.connection = Options(o.decode_secret, "decode-0");
    d.pool = o.decode_pool;
    auto w = o.decode_engine ? DecodeWorker::Start(decode_transport, o.decode_engine, d)
                             : DecodeWorker::Start(decode_transport, &SmallModel(), d);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (!w.ok()) return nullptr;
    c->decode = std::move(*w);
    decode_addresses.push_back(c->decode->address());
  }
  for (const auto& a : o.extra_decode_addresses) decode_addresses.push_back(a);
  PrefillWorkerOptions p;
  p.decode_addresses = decode_addresses;
  p.client_connection = Options("client-secret", "prefill-0");
  p.decode_connection = Options(o.prefill_secret, "prefill-0");
  p.decode_connection.shape_bytes_per_second = o.shape_bytes_per_second;
  p.controller.model = {LatencyModelKind::kStreamed, 0};
  p.controller.bandit = o.bandit;
  p.max_attempts = o.max_attempts;
  p.pool = o.pool;
  p.pool_store_profiles = o.pool_store_profiles;
  p.pool_chunk_tokens = o.pool_chunk_tokens;
  p.overlap_prefill = o.overlap_prefill;
  p.max_decode_connections = o.max_decode_connections;
  p.shaped_rate_log_sigma = o.shaped_rate_log_sigma;
  ProfileTable table = o.table ? *o.table : TestTable();
  auto w = o.prefill_engine ? PrefillWorker::Start(prefill_transport, o.prefill_engine, std::move(table), p)
                            : PrefillWorker::Start(prefill_transport, &SmallModel(), std::move(table), p);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  if (!w.ok()) return nullptr;
  c->prefill = std::move(*w);
  ServeClientOptions co;
  co.prefill_addresses = {c->prefill->address()};
  co.connection = Options("client-secret", "router");
  c->client = std::make_unique<ServeClient>(c->transport.get(), co);
  return c;
}

}  // namespace kvserve::servetest

#endif  // KVSERVE_SERVE_SERVE_TEST_UTIL_H_
