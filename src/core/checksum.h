// Copyright kvserve authors. Checksums used by frames and the wire protocol.
#ifndef KVSERVE_CORE_CHECKSUM_H_
#define KVSERVE_CORE_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

namespace kvserve {

// XXH3 64-bit hash (seed 0) of data[0..size), from libxxhash.
uint64_t Checksum64(const void* data, size_t size);
// Low 32 bits of Checksum64: the per-record checksum of docs/format.md.
inline uint32_t Checksum32(const void* data, size_t size) {
  return static_cast<uint32_t>(Checksum64(data, size));
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_CHECKSUM_H_
