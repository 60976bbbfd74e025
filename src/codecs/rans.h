// Copyright kvserve authors. The `rans` codec (CodecType::kRans): static
// per-segment rANS with 32 interleaved 32-bit states and 16-bit
// renormalisation, plus a packed fallback. The byte layout is specified at
// the top of rans.cc (copied into docs/format.md §Codecs/rans).
#ifndef KVSERVE_CODECS_RANS_H_
#define KVSERVE_CODECS_RANS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "codecs/pack.h"
#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::codecs {

// Interleaved states per segment: symbol i is coded by lane i % kRansLanes.
// 32 = one CUDA warp, so a GPU decoder maps lanes to threads one to one.
inline constexpr int kRansLanes = 32;
// Lower bound of a normalised state; states live in [kRansStateLow, 2^32).
inline constexpr uint32_t kRansStateLow = uint32_t{1} << 16;
inline constexpr int kRansMinTableBits = 8;
inline constexpr int kRansMaxTableBits = 15;
inline constexpr int kRansDefaultTableBits = 12;

// First byte of every rans segment.
enum class RansMode : uint8_t {
  kRans = 0,    // frequency table + states + 16-bit words
  kPacked = 1,  // the pack codec's bytes follow (smaller than rANS here)
};

// Normalises symbol `counts` (counts.size() == levels, sum > 0) to
// frequencies summing to 2^table_bits, into freqs[0..levels). Integer-only
// and deterministic: freq_s = max(1, round(count_s * 2^table_bits / total))
// for count_s > 0 (round half up), 0 for count_s == 0; then the difference
// to 2^table_bits is added to / taken from the symbol with the largest
// frequency (lowest index on ties), repeating on the next largest while a
// removal would take a frequency below 1. Requires levels <= 2^table_bits.
void NormalizeFrequencies(std::span<const uint64_t> counts, int table_bits,
                          std::span<uint32_t> freqs);

// Thread-safe: Encode and Decode keep no state besides the immutable
// table precision.
class RansCodec final : public pipeline::Codec {
 public:
  // `table_bits` in [kRansMinTableBits, kRansMaxTableBits]; values outside
  // are clamped (the profile layer validates the parameter first).
  // `impl` pins the decoder's implementation for tests and benchmarks
  // (kBest: the AVX2 word-expanding decoder when the CPU has AVX2); every
  // choice decodes the same symbols and reports the same errors.
  explicit RansCodec(int table_bits = kRansDefaultTableBits, PackImpl impl = PackImpl::kBest);

  // Appends the segment's rans form: rANS, or the packed fallback when that
  // is not larger. InvalidArgument for an invalid segment; `out` unchanged.
  Status Encode(const pipeline::CodeSegment& segment, std::vector<uint8_t>* out) const override;
  // Decodes a segment written by Encode (with any table_bits). Corruption
  // for any malformed input: bad mode, levels mismatch, frequency table not
  // summing to 2^table_bits, initial states below 2^16, word stream overrun
  // or not fully consumed, final states not equal to 2^16, trailing bytes.
  Status Decode(std::span<const uint8_t> in, uint16_t levels, size_t count,
                uint8_t* out) const override;

  int table_bits() const { return table_bits_; }

 private:
  int table_bits_;
  PackImpl impl_;
};

}  // namespace kvserve::codecs

#endif  // KVSERVE_CODECS_RANS_H_
