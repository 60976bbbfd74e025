// Copyright kvserve authors. The `zstd` codec (CodecType::kZstd): the
// segment's packed form (pack.h) compressed as one zstd frame.
//
// Layout (docs/format.md §Codecs/zstd): exactly one zstd frame (RFC 8878)
// whose declared content size equals ceil(count * b / 8), b =
// BitsForLevels(levels), and whose content is the pack codec's bytes.
#ifndef KVSERVE_CODECS_ZSTD_CODEC_H_
#define KVSERVE_CODECS_ZSTD_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/status.h"
#include "core/stages.h"

namespace kvserve::codecs {

inline constexpr int kZstdDefaultLevel = 3;

// Thread-safe: compression and decompression contexts are thread_local,
// created on a thread's first use and reused by every later call on it.
class ZstdCodec final : public pipeline::Codec {
 public:
  // `level` in [1, 19]; values outside are clamped.
  explicit ZstdCodec(int level = kZstdDefaultLevel);

  // Appends one zstd frame. InvalidArgument for an invalid segment;
  // Internal if libzstd fails. `out` is unchanged on error.
  Status Encode(const pipeline::CodeSegment& segment, std::vector<uint8_t>* out) const override;
  // Corruption unless `in` is exactly one zstd frame declaring the expected
  // packed size (checked before any allocation) that decompresses to a
  // valid packed form of `count` symbols < levels.
  Status Decode(std::span<const uint8_t> in, uint16_t levels, size_t count,
                uint8_t* out) const override;

  int level() const { return level_; }

 private:
  int level_;
};

}  // namespace kvserve::codecs

#endif  // KVSERVE_CODECS_ZSTD_CODEC_H_
