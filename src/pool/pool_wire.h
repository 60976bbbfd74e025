// Copyright kvserve authors. The pool protocol carried over Connections
// (docs/transport.md §Pool protocol). Internal to src/pool.
#ifndef KVSERVE_POOL_POOL_WIRE_H_
#define KVSERVE_POOL_POOL_WIRE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvserve/pool.h"

namespace kvserve::pool {

inline constexpr uint8_t kMsgPut = 0x20;
inline constexpr uint8_t kMsgGet = 0x21;
inline constexpr uint8_t kMsgDelete = 0x22;
inline constexpr uint8_t kMsgLookup = 0x23;
inline constexpr uint8_t kMsgStats = 0x24;
// Get whose value, a frame, follows the (ok) reply as a streamed transfer
// (FRAME_BEGIN, records, FRAME_END; the client acknowledges).
inline constexpr uint8_t kMsgGetFrame = 0x25;
// Several kMsgGetFrame in one request (keys := u32 count, count x key): the
// server answers each key in order with a reply and, when ok, its streamed
// frame, waiting for each frame's ack; it stops after the first reply that
// is not ok and after the first ack that refuses its frame.
inline constexpr uint8_t kMsgGetFrames = 0x26;
inline constexpr uint8_t kMsgReply = 0x2F;

// key := u8 model_len, model, u64 prefix_hash, u16 profile_len, profile.
void EncodeKey(const PoolKey& key, std::vector<uint8_t>* out);
// Parses a key from the front of `bytes`; returns bytes used. Corruption
// when malformed.
Result<size_t> DecodeKey(std::span<const uint8_t> bytes, PoolKey* key);
// keys := u32 count, count x key (kMsgGetFrames).
void EncodeKeys(std::span<const PoolKey> keys, std::vector<uint8_t>* out);
// Corruption when malformed or followed by trailing bytes.
Result<std::vector<PoolKey>> DecodeKeys(std::span<const uint8_t> bytes);
// prefix := u8 model_len, model, u64 prefix_hash (Lookup requests).
void EncodePrefix(std::string_view model_id, uint64_t prefix_hash, std::vector<uint8_t>* out);
Status DecodePrefix(std::span<const uint8_t> bytes, std::string* model_id, uint64_t* prefix_hash);

// reply := u8 status code, u16 message_len, message, body.
void EncodeReplyHeader(const Status& status, std::vector<uint8_t>* out);
// Splits a reply into its status and body.
Status DecodeReply(std::span<const uint8_t> payload, std::span<const uint8_t>* body);

void EncodeLookup(const std::vector<PoolEntryInfo>& entries, std::vector<uint8_t>* out);
Result<std::vector<PoolEntryInfo>> DecodeLookup(std::span<const uint8_t> body);
void EncodeStats(const PoolStats& stats, std::vector<uint8_t>* out);
Result<PoolStats> DecodeStats(std::span<const uint8_t> body);

}  // namespace kvserve::pool

#endif  // KVSERVE_POOL_POOL_WIRE_H_
