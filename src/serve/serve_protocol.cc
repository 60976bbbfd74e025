// Copyright kvserve authors. Serve protocol payloads (docs/e2e.md §Protocol).
#include "serve/serve_protocol.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "pool/pool_wire.h"

namespace kvserve::serve {
namespace {

using nlohmann::json;

std::vector<uint8_t> JsonBytes(const json& j) {
  const std::string s = j.dump();
  return std::vector<uint8_t>(s.begin(), s.end());
}

Result<json> ParseJson(std::span<const uint8_t> bytes, const char* what) {
  json j = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::Corruption(std::string("malformed ") + what + " message (not a JSON object)");
  return j;
}

// Reads field `key` of `j` into `out`; Corruption naming it when it is
// missing or of the wrong type.
template <typename T>
Status Field(const json& j, const char* key, T* out, const char* what) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Corruption(std::string(what) + " message lacks \"" + key + "\"");
  try {
    *out = it->get<T>();
  } catch (const std::exception&) {
    return Status::Corruption(std::string(what) + " message: \"" + key + "\" has the wrong type");
  }
  return Status::Ok();
}

template <typename T>
Status OptionalField(const json& j, const char* key, T* out, const char* what) {
  if (!j.contains(key)) return Status::Ok();
  return Field(j, key, out, what);
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

json StatusJson(const Status& s) {
  return json{{"code", static_cast<int>(s.code())}, {"message", s.message()}};
}

Status StatusFromJson(const json& j, const char* what) {
  int code = 0;
  std::string message;
  auto it = j.find("status");
  if (it == j.end() || !it->is_object()) return Status::Corruption(std::string(what) + " lacks a status");
  KVSERVE_RETURN_IF_ERROR(Field(*it, "code", &code, what));
  KVSERVE_RETURN_IF_ERROR(Field(*it, "message", &message, what));
  if (code < 0 || code > static_cast<int>(StatusCode::kInternal))
    return Status::Corruption(std::string(what) + ": unknown status code " + std::to_string(code));
  if (code == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(code), message);
}

json SamplingJson(const SamplingOptions& s) {
  return json{{"temperature", s.temperature}, {"top_p", s.top_p}, {"seed", s.seed}};
}

Status SamplingFromJson(const json& j, SamplingOptions* s, const char* what) {
  auto it = j.find("sampling");
  if (it == j.end()) return Status::Ok();
  if (!it->is_object()) return Status::Corruption(std::string(what) + ": sampling is not an object");
  KVSERVE_RETURN_IF_ERROR(OptionalField(*it, "temperature", &s->temperature, what));
  KVSERVE_RETURN_IF_ERROR(OptionalField(*it, "top_p", &s->top_p, what));
  KVSERVE_RETURN_IF_ERROR(OptionalField(*it, "seed", &s->seed, what));
  return Status::Ok();
}

// JSON cannot hold infinity: a missing SLO means none.
json MaybeFinite(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
double FromMaybeFinite(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::numeric_limits<double>::infinity();
  return it->get<double>();
}

}  // namespace

std::vector<uint8_t> EncodeRequest(const ServeRequest& r) {
  return JsonBytes(json{{"id", r.id},
                        {"workload", r.workload},
                        {"prompt", r.prompt},
                        {"max_new_tokens", r.max_new_tokens},
                        {"slo_seconds", MaybeFinite(r.slo_seconds)},
                        {"quality_min", r.quality_min},
                        {"method", r.method},
                        {"sampling", SamplingJson(r.sampling)},
                        {"stop_at_eos", r.stop_at_eos},
                        {"use_pool", r.use_pool},
                        {"store_before_reply", r.store_before_reply}});
}

Result<ServeRequest> DecodeRequest(std::span<const uint8_t> payload) {
  constexpr const char* kWhat = "request";
  KVSERVE_ASSIGN_OR_RETURN(json j, ParseJson(payload, kWhat));
  ServeRequest r;
  KVSERVE_RETURN_IF_ERROR(Field(j, "id", &r.id, kWhat));
  KVSERVE_RETURN_IF_ERROR(Field(j, "prompt", &r.prompt, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "workload", &r.workload, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "max_new_tokens", &r.max_new_tokens, kWhat));
  r.slo_seconds = FromMaybeFinite(j, "slo_seconds");
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "quality_min", &r.quality_min, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "method", &r.method, kWhat));
  KVSERVE_RETURN_IF_ERROR(SamplingFromJson(j, &r.sampling, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "stop_at_eos", &r.stop_at_eos, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "use_pool", &r.use_pool, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "store_before_reply", &r.store_before_reply, kWhat));
  return r;
}

std::vector<uint8_t> EncodeResponse(const ServeResponse& r) {
  const RequestTimings& t = r.timings;
  json timings = {{"queue_seconds", t.queue_seconds},
                  {"prefill_seconds", t.prefill_seconds},
                  {"encode_seconds", t.encode_seconds},
                  {"transfer_seconds", t.transfer_seconds},
                  {"decode_kv_seconds", t.decode_kv_seconds},
                  {"generation_seconds", t.generation_seconds},
                  {"kv_seconds", t.kv_seconds},
                  {"pool_fetch_seconds", t.pool_fetch_seconds},
                  {"pool_wait_seconds", t.pool_wait_seconds},
                  {"connection_wait_seconds", t.connection_wait_seconds},
                  {"ttft_seconds", t.ttft_seconds},
                  {"after_first_token_seconds", t.after_first_token_seconds},
                  {"jct_seconds", t.jct_seconds},
                  {"kv_bytes", t.kv_bytes},
                  {"frame_bytes", t.frame_bytes},
                  {"bandwidth_estimate", t.bandwidth_estimate},
                  {"link_bytes_per_second", t.link_bytes_per_second},
                  {"link_transfers", t.link_transfers},
                  {"predicted_kv_seconds", t.predicted_kv_seconds},
                  {"profile", t.profile},
                  {"explored", t.explored},
                  {"feasible", t.feasible},
                  {"prefix_hit", t.prefix_hit},
                  {"recomputed", t.recomputed},
                  {"streamed", t.streamed},
                  {"attempts", t.attempts},
                  {"prefix_chunks", t.prefix_chunks},
                  {"hit_error", t.hit_error}};
  return JsonBytes(json{{"id", r.id},
                        {"status", StatusJson(r.status)},
                        {"tokens", r.tokens},
                        {"timings", timings}});
}

Result<ServeResponse> DecodeResponse(std::span<const uint8_t> payload) {
  constexpr const char* kWhat = "response";
  KVSERVE_ASSIGN_OR_RETURN(json j, ParseJson(payload, kWhat));
  ServeResponse r;
  KVSERVE_RETURN_IF_ERROR(Field(j, "id", &r.id, kWhat));
  if (!j.contains("status")) return Status::Corruption("response lacks a status");
  r.status = StatusFromJson(j, kWhat);
  KVSERVE_RETURN_IF_ERROR(Field(j, "tokens", &r.tokens, kWhat));
  auto it = j.find("timings");
  if (it == j.end() || !it->is_object()) return Status::Corruption("response lacks timings");
  const json& tj = *it;
  RequestTimings& t = r.timings;
  for (auto [key, field] : {std::pair{"queue_seconds", &t.queue_seconds},
                            {"prefill_seconds", &t.prefill_seconds},
                            {"encode_seconds", &t.encode_seconds},
                            {"transfer_seconds", &t.transfer_seconds},
                            {"decode_kv_seconds", &t.decode_kv_seconds},
                            {"generation_seconds", &t.generation_seconds},
                            {"kv_seconds", &t.kv_seconds},
                            {"pool_fetch_seconds", &t.pool_fetch_seconds},
                            {"pool_wait_seconds", &t.pool_wait_seconds},
                            {"connection_wait_seconds", &t.connection_wait_seconds},
                            {"ttft_seconds", &t.ttft_seconds},
                            {"after_first_token_seconds", &t.after_first_token_seconds},
                            {"jct_seconds", &t.jct_seconds},
                            {"bandwidth_estimate", &t.bandwidth_estimate},
                            {"link_bytes_per_second", &t.link_bytes_per_second},
                            {"predicted_kv_seconds", &t.predicted_kv_seconds}})
    KVSERVE_RETURN_IF_ERROR(OptionalField(tj, key, field, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "kv_bytes", &t.kv_bytes, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "frame_bytes", &t.frame_bytes, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "profile", &t.profile, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "explored", &t.explored, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "feasible", &t.feasible, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "prefix_hit", &t.prefix_hit, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "recomputed", &t.recomputed, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "streamed", &t.streamed, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "attempts", &t.attempts, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "link_transfers", &t.link_transfers, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "prefix_chunks", &t.prefix_chunks, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(tj, "hit_error", &t.hit_error, kWhat));
  return r;
}

std::vector<uint8_t> EncodeGenerate(const GenerateMessage& m) {
  std::vector<uint8_t> head = JsonBytes(json{{"id", m.request_id},
                                             {"transfer_ids", m.transfer_ids},
                                             {"prompt", m.prompt},
                                             {"suffix", m.suffix},
                                             {"max_new_tokens", m.max_new_tokens},
                                             {"sampling", SamplingJson(m.sampling)},
                                             {"stop_at_eos", m.stop_at_eos},
                                             {"logits", m.last_logits.size()}});
  std::vector<uint8_t> out(4 + head.size() + m.last_logits.size() * sizeof(float));
  const uint32_t n = static_cast<uint32_t>(head.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 4, head.data(), head.size());
  if (!m.last_logits.empty())
    std::memcpy(out.data() + 4 + head.size(), m.last_logits.data(),
                m.last_logits.size() * sizeof(float));
  return out;
}

Result<GenerateMessage> DecodeGenerate(std::span<const uint8_t> payload) {
  constexpr const char* kWhat = "generate";
  if (payload.size() < 4) return Status::Corruption("generate message shorter than 4 bytes");
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{payload[i]} << (8 * i);
  if (n > payload.size() - 4) return Status::Corruption("generate message: JSON length exceeds payload");
  KVSERVE_ASSIGN_OR_RETURN(json j, ParseJson(payload.subspan(4, n), kWhat));
  GenerateMessage m;
  uint64_t logits = 0;
  KVSERVE_RETURN_IF_ERROR(Field(j, "id", &m.request_id, kWhat));
  // Bound the list before converting it (the JSON itself is bounded by the
  // connection's message limit).
  auto ids = j.find("transfer_ids");
  if (ids == j.end() || !ids->is_array())
    return Status::Corruption("generate message lacks a \"transfer_ids\" list");
  if (ids->empty() || ids->size() > kMaxGenerateTransfers)
    return Status::Corruption("generate message names " + std::to_string(ids->size()) +
                              " transfers; 1.." + std::to_string(kMaxGenerateTransfers) +
                              " allowed");
  KVSERVE_RETURN_IF_ERROR(Field(j, "transfer_ids", &m.transfer_ids, kWhat));
  KVSERVE_RETURN_IF_ERROR(Field(j, "prompt", &m.prompt, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "suffix", &m.suffix, kWhat));
  KVSERVE_RETURN_IF_ERROR(Field(j, "max_new_tokens", &m.max_new_tokens, kWhat));
  KVSERVE_RETURN_IF_ERROR(SamplingFromJson(j, &m.sampling, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "stop_at_eos", &m.stop_at_eos, kWhat));
  KVSERVE_RETURN_IF_ERROR(Field(j, "logits", &logits, kWhat));
  const size_t rest = payload.size() - 4 - n;
  if (logits > rest / sizeof(float) || logits * sizeof(float) != rest)
    return Status::Corruption("generate message: logits count does not match the payload");
  m.last_logits.resize(logits);
  if (logits > 0) std::memcpy(m.last_logits.data(), payload.data() + 4 + n, rest);
  return m;
}

std::vector<uint8_t> EncodeResult(const ResultMessage& m) {
  return JsonBytes(json{{"id", m.request_id},
                        {"status", StatusJson(m.status)},
                        {"tokens", m.tokens},
                        {"decode_kv_seconds", m.decode_kv_seconds},
                        {"generation_seconds", m.generation_seconds},
                        {"first_token_seconds", m.first_token_seconds}});
}

Result<ResultMessage> DecodeResult(std::span<const uint8_t> payload) {
  constexpr const char* kWhat = "result";
  KVSERVE_ASSIGN_OR_RETURN(json j, ParseJson(payload, kWhat));
  ResultMessage m;
  KVSERVE_RETURN_IF_ERROR(Field(j, "id", &m.request_id, kWhat));
  if (!j.contains("status")) return Status::Corruption("result lacks a status");
  m.status = StatusFromJson(j, kWhat);
  KVSERVE_RETURN_IF_ERROR(Field(j, "tokens", &m.tokens, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "decode_kv_seconds", &m.decode_kv_seconds, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "generation_seconds", &m.generation_seconds, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "first_token_seconds", &m.first_token_seconds, kWhat));
  return m;
}

std::vector<uint8_t> EncodePoolFetch(const PoolFetchMessage& m) {
  // Each key as the pool's own key encoding in hex: a model id may be any
  // bytes, which a JSON string cannot carry.
  json keys = json::array();
  std::vector<uint8_t> bytes;
  for (const PoolKey& k : m.keys) {
    bytes.clear();
    pool::EncodeKey(k, &bytes);
    std::string hex;
    hex.reserve(2 * bytes.size());
    for (uint8_t b : bytes) {
      hex.push_back("0123456789abcdef"[b >> 4]);
      hex.push_back("0123456789abcdef"[b & 15]);
    }
    keys.push_back(std::move(hex));
  }
  return JsonBytes(json{{"id", m.request_id}, {"first_transfer_id", m.first_transfer_id}, {"keys", keys}});
}

Result<PoolFetchMessage> DecodePoolFetch(std::span<const uint8_t> payload) {
  constexpr const char* kWhat = "pool fetch";
  KVSERVE_ASSIGN_OR_RETURN(json j, ParseJson(payload, kWhat));
  PoolFetchMessage m;
  KVSERVE_RETURN_IF_ERROR(Field(j, "id", &m.request_id, kWhat));
  KVSERVE_RETURN_IF_ERROR(Field(j, "first_transfer_id", &m.first_transfer_id, kWhat));
  auto keys = j.find("keys");
  if (keys == j.end() || !keys->is_array()) return Status::Corruption("pool fetch message lacks a \"keys\" list");
  if (keys->empty() || keys->size() > kMaxGenerateTransfers)
    return Status::Corruption("pool fetch message names " + std::to_string(keys->size()) + " chunks; 1.." +
                              std::to_string(kMaxGenerateTransfers) + " allowed");
  if (m.first_transfer_id > std::numeric_limits<uint64_t>::max() - keys->size())
    return Status::Corruption("pool fetch message: transfer ids overflow");
  std::vector<uint8_t> bytes;
  for (const json& k : *keys) {
    const std::string* hex = k.get_ptr<const std::string*>();
    if (hex == nullptr || hex->size() % 2 != 0) return Status::Corruption("pool fetch message: a key is not hex");
    bytes.clear();
    for (size_t i = 0; i < hex->size(); i += 2) {
      const int hi = HexDigit((*hex)[i]), lo = HexDigit((*hex)[i + 1]);
      if (hi < 0 || lo < 0) return Status::Corruption("pool fetch message: a key is not hex");
      bytes.push_back(static_cast<uint8_t>(hi << 4 | lo));
    }
    PoolKey key;
    KVSERVE_ASSIGN_OR_RETURN(size_t used, pool::DecodeKey(bytes, &key));
    if (used != bytes.size()) return Status::Corruption("pool fetch message: trailing bytes after a key");
    m.keys.push_back(std::move(key));
  }
  return m;
}

std::vector<uint8_t> EncodePoolFetched(const PoolFetchedMessage& m) {
  return JsonBytes(json{{"id", m.request_id},
                        {"status", StatusJson(m.status)},
                        {"chunks", m.chunks},
                        {"frame_bytes", m.frame_bytes},
                        {"seconds", m.seconds},
                        {"decode_seconds", m.decode_seconds},
                        {"wait_seconds", m.wait_seconds}});
}

Result<PoolFetchedMessage> DecodePoolFetched(std::span<const uint8_t> payload) {
  constexpr const char* kWhat = "pool fetched";
  KVSERVE_ASSIGN_OR_RETURN(json j, ParseJson(payload, kWhat));
  PoolFetchedMessage m;
  KVSERVE_RETURN_IF_ERROR(Field(j, "id", &m.request_id, kWhat));
  if (!j.contains("status")) return Status::Corruption("pool fetched message lacks a status");
  m.status = StatusFromJson(j, kWhat);
  KVSERVE_RETURN_IF_ERROR(Field(j, "chunks", &m.chunks, kWhat));
  KVSERVE_RETURN_IF_ERROR(Field(j, "frame_bytes", &m.frame_bytes, kWhat));
  KVSERVE_RETURN_IF_ERROR(Field(j, "seconds", &m.seconds, kWhat));
  KVSERVE_RETURN_IF_ERROR(Field(j, "decode_seconds", &m.decode_seconds, kWhat));
  KVSERVE_RETURN_IF_ERROR(OptionalField(j, "wait_seconds", &m.wait_seconds, kWhat));
  for (const double seconds : {m.seconds, m.decode_seconds, m.wait_seconds})
    if (!std::isfinite(seconds) || seconds < 0)
      return Status::Corruption("pool fetched message: times must be finite and >= 0");
  if (!m.status.ok() && m.chunks != 0) return Status::Corruption("pool fetched message: chunks held after an error");
  return m;
}

bool IsRetryable(const Status& s) {
  switch (s.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kTimeout:
    case StatusCode::kCorruption:
    case StatusCode::kIOError:
      return true;
    default:
      return false;
  }
}

}  // namespace kvserve::serve
