// Copyright kvserve authors. CreateCodec (declared in core/stages.h).
#include <memory>
#include <string>

#include "codecs/lz4_codec.h"
#include "codecs/pack.h"
#include "codecs/rans.h"
#include "codecs/zstd_codec.h"
#include "core/stages.h"

namespace kvserve::pipeline {

Result<std::unique_ptr<Codec>> CreateCodec(const Profile& profile) {
  switch (profile.codec()) {
    case CodecType::kPack:
      return std::unique_ptr<Codec>(std::make_unique<codecs::PackCodec>());
    case CodecType::kRans:
      return std::unique_ptr<Codec>(std::make_unique<codecs::RansCodec>(
          static_cast<int>(profile.Get(ParamId::kTableBits))));
    case CodecType::kZstd:
      return std::unique_ptr<Codec>(std::make_unique<codecs::ZstdCodec>(
          static_cast<int>(profile.Get(ParamId::kZstdLevel))));
    case CodecType::kLz4:
      return std::unique_ptr<Codec>(std::make_unique<codecs::Lz4Codec>(
          static_cast<int>(profile.Get(ParamId::kLz4Accel))));
  }
  return Status::InvalidArgument("unknown codec type " +
                                 std::to_string(static_cast<int>(profile.codec())));
}

}  // namespace kvserve::pipeline
