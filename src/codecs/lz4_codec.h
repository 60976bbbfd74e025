// Copyright kvserve authors. The `lz4` codec (CodecType::kLz4): the
// segment's packed form (pack.h) compressed as one LZ4 block.
//
// Layout (docs/format.md §Codecs/lz4): one raw LZ4 block (no frame header)
// that decompresses to exactly ceil(count * b / 8) bytes, b =
// BitsForLevels(levels): the pack codec's bytes.
#ifndef KVSERVE_CODECS_LZ4_CODEC_H_
#define KVSERVE_CODECS_LZ4_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::codecs {

inline constexpr int kLz4DefaultAcceleration = 1;

// Thread-safe: Encode and Decode keep no shared state.
class Lz4Codec final : public pipeline::Codec {
 public:
  // `acceleration` in [1, 64]; values outside are clamped.
  explicit Lz4Codec(int acceleration = kLz4DefaultAcceleration);

  // Appends one LZ4 block. InvalidArgument for an invalid segment or a
  // packed form larger than LZ4_MAX_INPUT_SIZE; `out` unchanged on error.
  Status Encode(const pipeline::CodeSegment& segment, std::vector<uint8_t>* out) const override;
  // Corruption unless `in` is one LZ4 block that decompresses to exactly the
  // expected packed size and that packed form is valid.
  Status Decode(std::span<const uint8_t> in, uint16_t levels, size_t count,
                uint8_t* out) const override;

  int acceleration() const { return acceleration_; }

 private:
  int acceleration_;
};

}  // namespace kvserve::codecs

#endif  // KVSERVE_CODECS_LZ4_CODEC_H_
