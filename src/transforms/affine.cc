// Copyright kvserve authors.
#include "transforms/affine.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "transforms/chunk_check.h"

namespace kvserve::transforms {
namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

Status AffineTransform::Forward(const pipeline::ChunkInfo& info,
                                const pipeline::ChunkTensor& x,
                                pipeline::ByteWriter& side) const {
  KVSERVE_RETURN_IF_ERROR(CheckChunkTensor(x, "affine"));
  const int d = x.dim;
  const size_t channels = static_cast<size_t>(x.heads) * d;
  std::vector<float> shift(channels);
  std::vector<float> scale(channels);
  std::vector<float> mn(d);
  std::vector<float> mx(d);
  for (int h = 0; h < x.heads; ++h) {
    // Channel statistics over tokens; channels are contiguous within a row.
    std::fill(mn.begin(), mn.end(), std::numeric_limits<float>::infinity());
    std::fill(mx.begin(), mx.end(), -std::numeric_limits<float>::infinity());
    for (int t = 0; t < x.tokens; ++t) {
      const float* v = x.row(h, t);
      // Branch-free so the compiler can vectorize it; min/max are exact, so
      // any evaluation order gives the same values (up to zero signs, which
      // the canonicalization below makes irrelevant).
      for (int i = 0; i < d; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &v[i], 4);
        const bool finite = (bits & 0x7f800000u) != 0x7f800000u;
        const float lo = finite ? v[i] : kInf;
        const float hi = finite ? v[i] : -kInf;
        mn[i] = lo < mn[i] ? lo : mn[i];
        mx[i] = hi > mx[i] ? hi : mx[i];
      }
    }
    for (int i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(h) * d + i;
      if (mn[i] > mx[i]) {  // no finite value in this channel
        shift[k] = 0.0f;
        scale[k] = 1.0f;
        continue;
      }
      const float half_max = 0.5f * mx[i];
      const float half_min = 0.5f * mn[i];
      float s = half_max + half_min;
      if (s == 0.0f) s = 0.0f;  // canonical +0: min/max zero signs must not matter
      float r = half_max - half_min;
      if (r == 0.0f) r = 1.0f;
      shift[k] = s;
      scale[k] = r;
    }
  }
  for (float s : shift) side.PutF32(s);
  for (float r : scale) side.PutF32(r);
  for (int h = 0; h < x.heads; ++h) {
    const float* s = shift.data() + static_cast<size_t>(h) * d;
    const float* r = scale.data() + static_cast<size_t>(h) * d;
    for (int t = 0; t < x.tokens; ++t) {
      float* v = x.row(h, t);
      for (int i = 0; i < d; ++i) {
        const float centered = v[i] - s[i];
        v[i] = centered / r[i];
      }
    }
  }
  return Status::Ok();
}

Status AffineTransform::Inverse(const pipeline::ChunkInfo& info,
                                const pipeline::ChunkTensor& x,
                                pipeline::ByteReader& side) const {
  KVSERVE_RETURN_IF_ERROR(CheckChunkTensor(x, "affine"));
  KVSERVE_RETURN_IF_ERROR(CheckSideSize(side, SideBytes(x.heads, x.dim), "affine"));
  const int d = x.dim;
  const size_t channels = static_cast<size_t>(x.heads) * d;
  std::vector<float> shift(channels);
  std::vector<float> scale(channels);
  for (size_t k = 0; k < channels; ++k) {
    KVSERVE_RETURN_IF_ERROR(side.GetF32(&shift[k]));
    if (!std::isfinite(shift[k])) {
      return Status::Corruption("affine: non-finite shift for channel " + std::to_string(k));
    }
  }
  for (size_t k = 0; k < channels; ++k) {
    KVSERVE_RETURN_IF_ERROR(side.GetF32(&scale[k]));
    if (!std::isfinite(scale[k]) || !(scale[k] > 0.0f)) {
      return Status::Corruption("affine: scale for channel " + std::to_string(k) +
                                " must be finite and > 0");
    }
  }
  for (int h = 0; h < x.heads; ++h) {
    const float* s = shift.data() + static_cast<size_t>(h) * d;
    const float* r = scale.data() + static_cast<size_t>(h) * d;
    for (int t = 0; t < x.tokens; ++t) {
      float* v = x.row(h, t);
      for (int i = 0; i < d; ++i) {
        const float scaled = v[i] * r[i];
        v[i] = scaled + s[i];
      }
    }
  }
  return Status::Ok();
}

}  // namespace kvserve::transforms
