// Legitimate clients' latency under a flood of unauthenticated connections
// (docs/transport.md §3, "Admission"): for the pool server and the decode
// worker, a client that dials afresh for every request (a restarting
// prefill worker) is timed on a quiet server and with --flood silent
// connections held open against it and reopened as it drops them
// (tests/silent_flood.h), in alternating rounds of the same run (so both
// see the same background load). Prints one Markdown row per server: p50 /
// p99 quiet and flooded, their ratio, refused requests, the fewest silent
// sockets open at the end of a flooded round and how many the server
// dropped (each was reopened at once).
//   build/rel/bench/admission_bench [--requests N] [--rounds R] [--flood N] [--sources N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "experiments/model_directory.h"
#include "kvserve/codec.h"
#include "kvserve/pool.h"
#include "kvserve/runtime.h"
#include "kvserve/serve.h"
#include "kvserve/transport.h"
#include "serve/serve_protocol.h"
#include "silent_flood.h"

namespace kvserve {
namespace {

struct Args {
  int requests = 1000;  // per phase, over all rounds
  int rounds = 5;
  int flood = 2000;
  int sources = 1;
};

// Lets the server accept a new flood before the clients are timed.
void SleepForFlood() {
  const double until = MonotonicSeconds() + 0.3;
  while (MonotonicSeconds() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

ConnectionOptions Conn(const std::string& id) {
  ConnectionOptions o;
  o.secret = "admission-bench";
  o.local_id = id;
  o.io_timeout_seconds = 10;
  o.connect_timeout_seconds = 10;
  return o;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

struct Phase {
  std::vector<double> seconds;
  int refused = 0;
  int least_open = -1;    // flooded: fewest silent sockets open at a round's end
  int64_t reopened = 0;   // flooded: silent sockets the server dropped (reopened)
};

// One pool request from a fresh client: dial, authenticate, put 4 KiB, get it.
Status PoolRequest(Transport& tcp, const std::string& address, std::mt19937_64& rng) {
  RemotePoolOptions ro;
  ro.address = address;
  ro.connection = Conn("bench-client");
  ro.reconnect_attempts = 0;
  auto pool = NewRemotePool(&tcp, ro);
  std::vector<uint8_t> value(4096);
  for (auto& b : value) b = static_cast<uint8_t>(rng());
  const PoolKey key{"bench", rng(), "none"};
  KVSERVE_RETURN_IF_ERROR(pool->Put(key, value));
  std::vector<uint8_t> got;
  KVSERVE_RETURN_IF_ERROR(pool->Get(key, &got));
  return got == value ? Status::Ok() : Status::Corruption("pool returned other bytes");
}

// One decode-worker request from a fresh prefill-side connection: dial,
// authenticate, stream a 16-token raw frame, GENERATE one token.
Status DecodeRequest(Transport& tcp, const std::string& address, const Model& model,
                     const std::vector<uint8_t>& frame, const std::vector<float>& logits,
                     uint64_t id) {
  KVSERVE_ASSIGN_OR_RETURN(auto c, Connection::Dial(tcp, address, Conn("bench-prefill")));
  FrameSender sender(c.get());
  KVSERVE_RETURN_IF_ERROR(sender.sink(id).Append(frame));
  KVSERVE_RETURN_IF_ERROR(sender.Finish().status());
  serve::GenerateMessage g;
  g.request_id = id;
  g.transfer_ids = {id};
  g.prompt.assign(16, 1);
  g.max_new_tokens = 1;
  g.last_logits = logits;
  KVSERVE_RETURN_IF_ERROR(c->Send(kMsgServeGenerate, 0, serve::EncodeGenerate(g)));
  Message m;
  KVSERVE_RETURN_IF_ERROR(c->Receive(&m, 30));
  KVSERVE_ASSIGN_OR_RETURN(serve::ResultMessage r, serve::DecodeResult(m.payload));
  (void)model;
  return r.status;
}

template <typename Fn>
void Run(int n, Fn&& request, Phase& p) {
  for (int i = 0; i < n; ++i) {
    const double start = MonotonicSeconds();
    Status s = request(i);
    const double t = MonotonicSeconds() - start;
    if (!s.ok()) {
      ++p.refused;
      std::fprintf(stderr, "request %d failed: %s\n", i, s.ToString().c_str());
      continue;
    }
    p.seconds.push_back(t);
  }
}

// Alternates quiet and flooded rounds against `address`.
template <typename Fn>
void Compare(const Args& a, const std::string& address, Fn&& request, Phase& quiet,
             Phase& flooded) {
  const int per_round = std::max(1, a.requests / a.rounds);
  for (int r = 0; r < a.rounds; ++r) {
    Run(per_round, request, quiet);
    testing::SilentFlood flood(address, a.flood, {.sources = a.sources});
    SleepForFlood();
    Run(per_round, request, flooded);
    flooded.least_open =
        flooded.least_open < 0 ? flood.open() : std::min(flooded.least_open, flood.open());
    flooded.reopened += flood.dropped();
  }
}

void Row(const char* what, const Phase& quiet, const Phase& flooded, int n) {
  const double q50 = Percentile(quiet.seconds, 0.5) * 1e3, q99 = Percentile(quiet.seconds, 0.99) * 1e3;
  const double f50 = Percentile(flooded.seconds, 0.5) * 1e3,
               f99 = Percentile(flooded.seconds, 0.99) * 1e3;
  std::printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2fx | %d | %d | %lld |\n", what, n, q50,
              q99, f50, f99, q99 > 0 ? f99 / q99 : 0.0, quiet.refused + flooded.refused,
              flooded.least_open, static_cast<long long>(flooded.reopened));
}

int Main(const Args& a) {
  testing::RaiseFileLimit(static_cast<uint64_t>(2 * a.flood + 1024));
  auto tcp = NewTcpTransport();
  std::printf("| server | requests per phase | quiet p50 (ms) | quiet p99 (ms) | flooded p50 (ms) "
              "| flooded p99 (ms) | p99 flooded / quiet | refused | silent sockets open (fewest) "
              "| silent sockets dropped by the server |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::mt19937_64 rng(7);
  {
    auto backing = NewMemoryPool();
    PoolServerOptions so;
    so.listen_address = "127.0.0.1:0";
    so.connection = Conn("pool");
    auto server = PoolServer::Start(tcp.get(), backing.get(), so);
    if (!server.ok()) return 1;
    const std::string address = (*server)->address();
    Phase quiet, flooded;
    Compare(a, address, [&](int) { return PoolRequest(*tcp, address, rng); }, quiet, flooded);
    Row("pool server (dial + put 4 KiB + get)", quiet, flooded, static_cast<int>(quiet.seconds.size()));
  }
  {
    const auto dir = std::filesystem::temp_directory_path() / "kvserve-admission-bench-model";
    if (!WriteRandomModel(dir.string(), lab::FallbackModelSpec()).ok()) return 1;
    auto model = Model::Load(dir.string(), {.threads = 1});
    if (!model.ok()) return 1;
    DecodeWorkerOptions d;
    d.connection = Conn("decode");
    auto worker = DecodeWorker::Start(tcp.get(), model->get(), d);
    if (!worker.ok()) return 1;
    const std::string address = (*worker)->address();
    std::vector<int32_t> prompt(16, 1);
    auto prefill = (*model)->Prefill(prompt);
    if (!prefill.ok()) return 1;
    auto encoder = EncoderContext::Create(Profile::Parse("none").value(), {.threads = 1});
    std::vector<uint8_t> frame;
    VectorSink sink(&frame);
    if (!encoder.ok() || !(*encoder)->Encode(prefill->kv.view(), sink).ok()) return 1;
    uint64_t id = 1;
    auto request = [&](int) { return DecodeRequest(*tcp, address, **model, frame, prefill->logits, id++); };
    Phase quiet, flooded;
    Compare(a, address, request, quiet, flooded);
    Row("decode worker (dial + 16-token frame + generate 1)", quiet, flooded,
        static_cast<int>(quiet.seconds.size()));
    std::filesystem::remove_all(dir);
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--requests")) a.requests = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--flood")) a.flood = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) a.rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--sources")) a.sources = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--requests N] [--rounds R] [--flood N] [--sources N]\n",
                   argv[0]);
      return 2;
    }
  }
  return kvserve::Main(a);
}
