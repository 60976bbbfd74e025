// Copyright kvserve authors. The lz4 codec; layout in lz4_codec.h.
#include "codecs/lz4_codec.h"

#include <lz4.h>

#include <algorithm>
#include <string>

#include "codecs/pack.h"

namespace kvserve::codecs {
namespace {

std::vector<uint8_t>& Scratch() {
  thread_local std::vector<uint8_t> scratch;
  return scratch;
}

}  // namespace

Lz4Codec::Lz4Codec(int acceleration) : acceleration_(std::clamp(acceleration, 1, 64)) {}

Status Lz4Codec::Encode(const pipeline::CodeSegment& segment, std::vector<uint8_t>* out) const {
  KVSERVE_RETURN_IF_ERROR(ValidateSegment(segment));
  const int bits = pipeline::BitsForLevels(segment.levels);
  const size_t packed_size = PackedSize(segment.symbols.size(), bits);
  if (packed_size > LZ4_MAX_INPUT_SIZE) {
    return Status::InvalidArgument("lz4: segment too large for one block");
  }
  std::vector<uint8_t>& scratch = Scratch();
  scratch.resize(packed_size);
  PackSymbols(segment.symbols.data(), segment.symbols.size(), bits, scratch.data());
  const int bound = LZ4_compressBound(static_cast<int>(packed_size));
  const size_t start = out->size();
  out->resize(start + static_cast<size_t>(bound));
  const int written = LZ4_compress_fast(reinterpret_cast<const char*>(scratch.data()),
                                        reinterpret_cast<char*>(out->data() + start),
                                        static_cast<int>(packed_size), bound, acceleration_);
  if (written <= 0) {
    out->resize(start);
    return Status::Internal("lz4: compression failed");
  }
  out->resize(start + static_cast<size_t>(written));
  return Status::Ok();
}

Status Lz4Codec::Decode(std::span<const uint8_t> in, uint16_t levels, size_t count,
                        uint8_t* out) const {
  KVSERVE_RETURN_IF_ERROR(ValidateDecodeShape(levels, count));
  const int bits = pipeline::BitsForLevels(levels);
  const size_t packed_size = PackedSize(count, bits);
  if (packed_size > LZ4_MAX_INPUT_SIZE || in.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) {
    return Status::Corruption("lz4: block too large");
  }
  // An LZ4 block expands at most about 255:1 (a length byte of 255 per 255
  // output bytes); a block claiming far more is corrupt and is rejected
  // before the scratch buffer grows.
  if (packed_size > in.size() * 256 + 64) return Status::Corruption("lz4: block too short");
  std::vector<uint8_t>& scratch = Scratch();
  scratch.resize(packed_size + 1);  // never empty, so data() is valid
  const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(in.data()),
                                      reinterpret_cast<char*>(scratch.data()),
                                      static_cast<int>(in.size()), static_cast<int>(packed_size));
  if (got < 0 || static_cast<size_t>(got) != packed_size) {
    return Status::Corruption("lz4: block does not decompress to the packed size " +
                              std::to_string(packed_size));
  }
  return UnpackSymbols(std::span<const uint8_t>(scratch.data(), packed_size), bits, count, levels,
                       out);
}

}  // namespace kvserve::codecs
