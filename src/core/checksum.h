// Copyright kvserve authors. Checksums used by frames and the wire protocol.
#ifndef KVSERVE_CORE_CHECKSUM_H_
#define KVSERVE_CORE_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

namespace kvserve {

// XXH3 64-bit hash (seed 0) of data[0..size). The code is libxxhash's
// header compiled into kvserve twice, for AVX2 and for the baseline
// instruction set, and the one the CPU runs best is picked once per process
// (Debian's libxxhash is built for the baseline: about 4x slower on 1 MiB
// than its AVX2 form). Every form returns the same value.
uint64_t Checksum64(const void* data, size_t size);
// Low 32 bits of Checksum64: the per-record checksum of docs/format.md.
inline uint32_t Checksum32(const void* data, size_t size) {
  return static_cast<uint32_t>(Checksum64(data, size));
}

// Checksum64 of a byte sequence given in pieces: Update with each piece in
// order, then Digest equals Checksum64 of their concatenation (any split,
// empty pieces included). Digest does not end the stream: more Updates may
// follow. Not thread-safe; cheap to construct (no allocation).
class Checksum64Stream {
 public:
  Checksum64Stream();
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

  // Size of XXH3_state_t of the libxxhash version built against (checked).
  static constexpr size_t kStateBytes = 576;

 private:
  alignas(64) unsigned char state_[kStateBytes];
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_CHECKSUM_H_
