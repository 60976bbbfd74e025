// Copyright kvserve authors. Fixed-width bit packing of quantised symbols:
// the `pack` codec and the packing primitives the other codecs build on.
//
// Packed layout (docs/format.md §Codecs/pack): with b = BitsForLevels(levels)
// and count symbols, the packed form is ceil(count * b / 8) bytes; symbol i
// occupies bits [i*b, (i+1)*b) of the byte string, where bit k of the string
// is bit (k % 8) of byte k / 8 (LSB-first, little-endian). The unused high
// bits of the final byte must be zero; decoders reject anything else.
//
// Every primitive has a scalar reference and, on x86-64 CPUs with AVX2, a
// vectorised version for b in 1..7 (b = 8 is a copy) chosen at run time.
// Both produce the same bytes; the `impl` argument lets tests and benchmarks
// pin one of them.
#ifndef KVSERVE_CODECS_PACK_H_
#define KVSERVE_CODECS_PACK_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::codecs {

// Which implementation of the packing primitives to run.
enum class PackImpl : uint8_t {
  kScalar = 0,  // portable reference
  kAvx2 = 1,    // requires CpuHasAvx2()
  kBest = 2,    // kAvx2 when the CPU has it, else kScalar
};

// True when the running CPU supports AVX2 (cached after the first call).
bool CpuHasAvx2();

// Largest symbol count any codec accepts in one segment (2^40): keeps every
// size computation far from overflow.
inline constexpr size_t kMaxSegmentSymbols = size_t{1} << 40;

// Bytes of the packed form of `count` symbols at `bits` (1..8) bits each.
inline size_t PackedSize(size_t count, int bits) {
  return (count * static_cast<size_t>(bits) + 7) / 8;
}

// Writes the packed form of symbols[0..count) at `bits` bits per symbol into
// out[0..PackedSize(count, bits)). Precondition (unchecked): every symbol
// < 2^bits. Deterministic; all implementations write identical bytes.
void PackSymbols(const uint8_t* symbols, size_t count, int bits, uint8_t* out,
                 PackImpl impl = PackImpl::kBest);

// Reads `count` symbols of `bits` bits from `in` into out[0..count).
// Returns Corruption unless in.size() == PackedSize(count, bits), the unused
// high bits of the final byte are zero, and every symbol is < levels
// (2 <= levels <= 2^bits). Never reads outside `in` or writes outside
// out[0..count); on error out's contents are unspecified.
[[nodiscard]] Status UnpackSymbols(std::span<const uint8_t> in, int bits, size_t count,
                                   uint16_t levels, uint8_t* out,
                                   PackImpl impl = PackImpl::kBest);

// Returns InvalidArgument unless 2 <= segment.levels <= 256, the segment has
// at most kMaxSegmentSymbols symbols, and every symbol is < levels. Encoders
// call this first.
[[nodiscard]] Status ValidateSegment(const pipeline::CodeSegment& segment);

// Returns Corruption unless 2 <= levels <= 256 and count <=
// kMaxSegmentSymbols: the decode-side check of caller-provided sizes, which
// usually come off the wire.
[[nodiscard]] Status ValidateDecodeShape(uint16_t levels, size_t count);

// The `pack` codec (CodecType::kPack): the packed layout above, nothing
// else. Thread-safe: Encode and Decode keep no state.
class PackCodec final : public pipeline::Codec {
 public:
  explicit PackCodec(PackImpl impl = PackImpl::kBest) : impl_(impl) {}

  // Appends PackedSize(n, b) bytes. InvalidArgument for an invalid segment
  // (see ValidateSegment); `out` is then unchanged.
  Status Encode(const pipeline::CodeSegment& segment, std::vector<uint8_t>* out) const override;
  // Corruption unless `in` is exactly the packed form of `count` symbols
  // < levels (see UnpackSymbols).
  Status Decode(std::span<const uint8_t> in, uint16_t levels, size_t count,
                uint8_t* out) const override;
  // True for 256 levels: 8-bit packing is the identity.
  bool StoresVerbatim(uint16_t levels) const override { return levels == 256; }

 private:
  PackImpl impl_;
};

}  // namespace kvserve::codecs

#endif  // KVSERVE_CODECS_PACK_H_
