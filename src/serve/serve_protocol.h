// Copyright kvserve authors. The serve protocol's message payloads
// (docs/e2e.md §Protocol): JSON documents, plus raw f32 logits after the
// JSON of a GENERATE message. Every parser returns Corruption for malformed
// input and never trusts a length it has not checked against the payload.
#ifndef KVSERVE_SERVE_SERVE_PROTOCOL_H_
#define KVSERVE_SERVE_SERVE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvserve/serve.h"

namespace kvserve::serve {

// Most transfers one GENERATE may name (a decoded message naming more is
// Corruption): with 128-token pool chunks, a 512K-token prefix.
inline constexpr size_t kMaxGenerateTransfers = 4096;

// What the decode worker needs after the frames of a request: the
// transfers whose KV it concatenates along tokens, in order (one on the
// normal path, one per pool chunk on a prefix hit), the prompt ids (one per
// KV token), how to sample, and the logits of the last prompt token.
struct GenerateMessage {
  uint64_t request_id = 0;
  std::vector<uint64_t> transfer_ids;  // 1..kMaxGenerateTransfers frames, in order
  std::vector<int32_t> prompt;         // ids of the frames' KV tokens, concatenated
  // Tokens to run after importing the KV, before sampling (a prefix hit
  // whose KV covers only part of the prompt); empty: sample from
  // last_logits.
  std::vector<int32_t> suffix;
  int max_new_tokens = 1;
  SamplingOptions sampling;
  bool stop_at_eos = false;
  std::vector<float> last_logits;
};

// The decode worker's answer to a GENERATE.
struct ResultMessage {
  uint64_t request_id = 0;
  Status status;
  std::vector<int32_t> tokens;
  double decode_kv_seconds = 0;
  double generation_seconds = 0;
  double first_token_seconds = 0;  // GENERATE received to first token sampled
};

// A prefix hit the decode worker fetches itself from the pool it shares
// with the prefill worker (DecodeWorkerOptions::pool): chunk i's frame is
// `keys[i]`, received as transfer first_transfer_id + i.
struct PoolFetchMessage {
  uint64_t request_id = 0;
  uint64_t first_transfer_id = 0;
  std::vector<PoolKey> keys;  // 1..kMaxGenerateTransfers, in token order
};

// The decode worker's answer to a POOL_FETCH: the first `chunks` keys were
// received and verified (held for the GENERATE that follows; fewer than
// asked when the pool no longer had the next one). A non-OK status: no
// chunk is held; NotSupported when the worker has no pool (the prefill
// worker then relays the chunks itself).
struct PoolFetchedMessage {
  uint64_t request_id = 0;
  Status status;
  uint64_t chunks = 0;
  uint64_t frame_bytes = 0;   // of the chunks received
  double seconds = 0;         // first request to the pool to the last chunk decoded
  double decode_seconds = 0;  // sum of the record decode times
  // Of `seconds`, the time outside reading the chunks' records: each
  // chunk's KV allocated, its last windows awaited (on a GPU), held.
  double wait_seconds = 0;
};

std::vector<uint8_t> EncodeRequest(const ServeRequest& request);
Result<ServeRequest> DecodeRequest(std::span<const uint8_t> payload);
std::vector<uint8_t> EncodeResponse(const ServeResponse& response);
Result<ServeResponse> DecodeResponse(std::span<const uint8_t> payload);
std::vector<uint8_t> EncodeGenerate(const GenerateMessage& message);
Result<GenerateMessage> DecodeGenerate(std::span<const uint8_t> payload);
std::vector<uint8_t> EncodeResult(const ResultMessage& message);
Result<ResultMessage> DecodeResult(std::span<const uint8_t> payload);
std::vector<uint8_t> EncodePoolFetch(const PoolFetchMessage& message);
Result<PoolFetchMessage> DecodePoolFetch(std::span<const uint8_t> payload);
std::vector<uint8_t> EncodePoolFetched(const PoolFetchedMessage& message);
Result<PoolFetchedMessage> DecodePoolFetched(std::span<const uint8_t> payload);

// True for errors worth another attempt on a fresh connection or worker
// (Unavailable, Timeout, Corruption, IOError); false for errors the request
// itself causes (InvalidArgument, NotFound, ...).
bool IsRetryable(const Status& status);

}  // namespace kvserve::serve

#endif  // KVSERVE_SERVE_SERVE_PROTOCOL_H_
