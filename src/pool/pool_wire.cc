// Copyright kvserve authors.
#include "pool/pool_wire.h"

#include <algorithm>

#include "transport/wire.h"

namespace kvserve::pool {

using transport::GetU16;
using transport::GetU32;
using transport::GetU64;

namespace {
void AppendU16(std::vector<uint8_t>* out, uint16_t v) {
  out->push_back(v & 0xff);
  out->push_back(v >> 8);
}
void AppendU32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void AppendU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
}  // namespace

void EncodePrefix(std::string_view model_id, uint64_t prefix_hash, std::vector<uint8_t>* out) {
  out->push_back(static_cast<uint8_t>(model_id.size()));
  out->insert(out->end(), model_id.begin(), model_id.end());
  AppendU64(out, prefix_hash);
}

Status DecodePrefix(std::span<const uint8_t> bytes, std::string* model_id,
                    uint64_t* prefix_hash) {
  if (bytes.empty() || bytes.size() != 1u + bytes[0] + 8)
    return Status::Corruption("malformed pool prefix");
  model_id->assign(bytes.begin() + 1, bytes.begin() + 1 + bytes[0]);
  *prefix_hash = GetU64(bytes.data() + 1 + bytes[0]);
  return Status::Ok();
}

void EncodeKey(const PoolKey& key, std::vector<uint8_t>* out) {
  EncodePrefix(key.model_id, key.prefix_hash, out);
  AppendU16(out, static_cast<uint16_t>(key.profile.size()));
  out->insert(out->end(), key.profile.begin(), key.profile.end());
}

Result<size_t> DecodeKey(std::span<const uint8_t> bytes, PoolKey* key) {
  if (bytes.empty()) return Status::Corruption("malformed pool key");
  size_t pos = 1u + bytes[0];
  if (bytes.size() < pos + 8 + 2) return Status::Corruption("malformed pool key");
  key->model_id.assign(bytes.begin() + 1, bytes.begin() + pos);
  key->prefix_hash = GetU64(bytes.data() + pos);
  pos += 8;
  size_t profile_len = GetU16(bytes.data() + pos);
  pos += 2;
  if (bytes.size() < pos + profile_len) return Status::Corruption("malformed pool key");
  key->profile.assign(bytes.begin() + pos, bytes.begin() + pos + profile_len);
  return pos + profile_len;
}

void EncodeKeys(std::span<const PoolKey> keys, std::vector<uint8_t>* out) {
  AppendU32(out, static_cast<uint32_t>(keys.size()));
  for (const PoolKey& key : keys) EncodeKey(key, out);
}

Result<std::vector<PoolKey>> DecodeKeys(std::span<const uint8_t> bytes) {
  if (bytes.size() < 4) return Status::Corruption("malformed pool key list");
  const uint32_t count = GetU32(bytes.data());
  // Every key takes at least 11 bytes: a count the bytes cannot hold is
  // refused before anything is reserved.
  if (count > (bytes.size() - 4) / 11) return Status::Corruption("malformed pool key list");
  std::vector<PoolKey> keys(count);
  size_t pos = 4;
  for (PoolKey& key : keys) {
    KVSERVE_ASSIGN_OR_RETURN(size_t used, DecodeKey(bytes.subspan(pos), &key));
    pos += used;
  }
  if (pos != bytes.size()) return Status::Corruption("trailing bytes after the pool key list");
  return keys;
}

void EncodeReplyHeader(const Status& status, std::vector<uint8_t>* out) {
  out->clear();
  out->push_back(static_cast<uint8_t>(status.code()));
  size_t n = std::min<size_t>(status.message().size(), 1024);
  AppendU16(out, static_cast<uint16_t>(n));
  out->insert(out->end(), status.message().begin(), status.message().begin() + n);
}

Status DecodeReply(std::span<const uint8_t> payload, std::span<const uint8_t>* body) {
  if (payload.size() < 3) return Status::Corruption("malformed pool reply");
  uint8_t code = payload[0];
  size_t n = GetU16(payload.data() + 1);
  if (code > static_cast<uint8_t>(StatusCode::kInternal) || payload.size() < 3 + n)
    return Status::Corruption("malformed pool reply");
  *body = payload.subspan(3 + n);
  if (code == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(code),
                std::string(payload.begin() + 3, payload.begin() + 3 + n));
}

void EncodeLookup(const std::vector<PoolEntryInfo>& entries, std::vector<uint8_t>* out) {
  AppendU32(out, static_cast<uint32_t>(entries.size()));
  for (const auto& e : entries) {
    AppendU16(out, static_cast<uint16_t>(e.profile.size()));
    out->insert(out->end(), e.profile.begin(), e.profile.end());
    AppendU64(out, e.bytes);
  }
}

Result<std::vector<PoolEntryInfo>> DecodeLookup(std::span<const uint8_t> body) {
  if (body.size() < 4) return Status::Corruption("malformed lookup reply");
  uint32_t count = GetU32(body.data());
  size_t pos = 4;
  std::vector<PoolEntryInfo> out;
  for (uint32_t i = 0; i < count; ++i) {
    if (body.size() < pos + 2) return Status::Corruption("malformed lookup reply");
    size_t n = GetU16(body.data() + pos);
    pos += 2;
    if (body.size() < pos + n + 8) return Status::Corruption("malformed lookup reply");
    PoolEntryInfo e;
    e.profile.assign(body.begin() + pos, body.begin() + pos + n);
    e.bytes = GetU64(body.data() + pos + n);
    pos += n + 8;
    out.push_back(std::move(e));
  }
  if (pos != body.size()) return Status::Corruption("malformed lookup reply");
  return out;
}

void EncodeStats(const PoolStats& s, std::vector<uint8_t>* out) {
  for (uint64_t v : {s.entries, s.bytes, s.hits, s.misses, s.evictions}) AppendU64(out, v);
}

Result<PoolStats> DecodeStats(std::span<const uint8_t> body) {
  if (body.size() != 40) return Status::Corruption("malformed stats reply");
  PoolStats s;
  s.entries = GetU64(body.data());
  s.bytes = GetU64(body.data() + 8);
  s.hits = GetU64(body.data() + 16);
  s.misses = GetU64(body.data() + 24);
  s.evictions = GetU64(body.data() + 32);
  return s;
}

}  // namespace kvserve::pool
