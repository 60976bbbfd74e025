// Copyright kvserve authors. Prefix hashes and key validation.

#include <cstring>
#include <string>

#include "core/checksum.h"
#include "kvserve/pool.h"

namespace kvserve {

namespace {
// Token ids as little-endian bytes, whatever the host order.
void ToLittleEndian(std::span<const int32_t> tokens, std::vector<uint8_t>* out) {
  out->resize(tokens.size() * 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t v = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) (*out)[4 * i + b] = static_cast<uint8_t>(v >> (8 * b));
  }
}
}  // namespace

uint64_t PrefixHash(std::span<const int32_t> tokens) {
  std::vector<uint8_t> bytes;
  ToLittleEndian(tokens, &bytes);
  return Checksum64(bytes.data(), bytes.size());
}

std::vector<uint64_t> PrefixChunkHashes(std::span<const int32_t> tokens, int chunk_tokens) {
  std::vector<uint64_t> out;
  if (chunk_tokens <= 0) return out;
  Checksum64Stream hash;
  std::vector<uint8_t> bytes;
  const size_t chunk = static_cast<size_t>(chunk_tokens);
  for (size_t begin = 0; begin + chunk <= tokens.size(); begin += chunk) {
    ToLittleEndian(tokens.subspan(begin, chunk), &bytes);
    hash.Update(bytes.data(), bytes.size());
    out.push_back(hash.Digest());  // streaming digest == one-shot hash
  }
  return out;
}

Status ValidatePoolKey(const PoolKey& key) {
  if (key.model_id.empty() || key.model_id.size() > kMaxPoolModelIdBytes)
    return Status::InvalidArgument("pool key: model id must be 1.." +
                                   std::to_string(kMaxPoolModelIdBytes) + " bytes");
  if (key.profile.empty() || key.profile.size() > kMaxPoolProfileBytes)
    return Status::InvalidArgument("pool key: profile must be 1.." +
                                   std::to_string(kMaxPoolProfileBytes) + " bytes");
  return Status::Ok();
}

}  // namespace kvserve
