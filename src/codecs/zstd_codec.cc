// Copyright kvserve authors. The zstd codec; layout in zstd_codec.h.
#include "codecs/zstd_codec.h"

#include <zstd.h>

#include <algorithm>
#include <string>

#include "codecs/pack.h"

namespace kvserve::codecs {
namespace {

// One compression and one decompression context per thread, freed when the
// thread exits.
struct ThreadContexts {
  ZSTD_CCtx* cctx = nullptr;
  ZSTD_DCtx* dctx = nullptr;
  std::vector<uint8_t> scratch;
  ~ThreadContexts() {
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
  }
};

ThreadContexts& Contexts() {
  thread_local ThreadContexts contexts;
  return contexts;
}

}  // namespace

ZstdCodec::ZstdCodec(int level) : level_(std::clamp(level, 1, 19)) {}

Status ZstdCodec::Encode(const pipeline::CodeSegment& segment, std::vector<uint8_t>* out) const {
  KVSERVE_RETURN_IF_ERROR(ValidateSegment(segment));
  ThreadContexts& ctx = Contexts();
  if (ctx.cctx == nullptr) ctx.cctx = ZSTD_createCCtx();
  if (ctx.cctx == nullptr) return Status::ResourceExhausted("zstd: cannot create context");
  const int bits = pipeline::BitsForLevels(segment.levels);
  const size_t packed_size = PackedSize(segment.symbols.size(), bits);
  ctx.scratch.resize(packed_size);
  PackSymbols(segment.symbols.data(), segment.symbols.size(), bits, ctx.scratch.data());
  const size_t start = out->size();
  out->resize(start + ZSTD_compressBound(packed_size));
  const size_t written = ZSTD_compressCCtx(ctx.cctx, out->data() + start, out->size() - start,
                                           ctx.scratch.data(), packed_size, level_);
  if (ZSTD_isError(written)) {
    out->resize(start);
    return Status::Internal(std::string("zstd: ") + ZSTD_getErrorName(written));
  }
  out->resize(start + written);
  return Status::Ok();
}

Status ZstdCodec::Decode(std::span<const uint8_t> in, uint16_t levels, size_t count,
                         uint8_t* out) const {
  KVSERVE_RETURN_IF_ERROR(ValidateDecodeShape(levels, count));
  const int bits = pipeline::BitsForLevels(levels);
  const size_t packed_size = PackedSize(count, bits);
  // A regular frame (not a skippable one) that is exactly `in`, declaring
  // exactly the packed size: checked before anything is allocated.
  if (in.size() < 4 || (in[0] | in[1] << 8 | in[2] << 16 | uint32_t{in[3]} << 24) !=
                           ZSTD_MAGICNUMBER) {
    return Status::Corruption("zstd: missing frame magic");
  }
  const unsigned long long content = ZSTD_getFrameContentSize(in.data(), in.size());
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN ||
      content != packed_size) {
    return Status::Corruption("zstd: frame content size is not the packed size " +
                              std::to_string(packed_size));
  }
  const size_t frame_size = ZSTD_findFrameCompressedSize(in.data(), in.size());
  if (ZSTD_isError(frame_size) || frame_size != in.size()) {
    return Status::Corruption("zstd: input is not exactly one frame");
  }
  ThreadContexts& ctx = Contexts();
  if (ctx.dctx == nullptr) ctx.dctx = ZSTD_createDCtx();
  if (ctx.dctx == nullptr) return Status::ResourceExhausted("zstd: cannot create context");
  ctx.scratch.resize(packed_size);
  const size_t got =
      ZSTD_decompressDCtx(ctx.dctx, ctx.scratch.data(), packed_size, in.data(), in.size());
  if (ZSTD_isError(got)) return Status::Corruption(std::string("zstd: ") + ZSTD_getErrorName(got));
  if (got != packed_size) return Status::Corruption("zstd: short frame content");
  return UnpackSymbols(std::span<const uint8_t>(ctx.scratch.data(), packed_size), bits, count,
                       levels, out);
}

}  // namespace kvserve::codecs
