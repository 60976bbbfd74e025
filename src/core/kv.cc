#include "kvserve/kv.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

namespace kvserve {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "?";
}

Result<DType> ParseDType(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "F32" || name == "fp32") return DType::kF32;
  if (name == "f16" || name == "float16" || name == "F16" || name == "fp16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16" || name == "BF16") return DType::kBF16;
  return Status::InvalidArgument("unknown dtype '" + std::string(name) +
                                 "' (expected f32, f16 or bf16)");
}

KvStrides KvStrides::Contiguous(const KvShape& s) {
  KvStrides st;
  st.dim = 1;
  st.token = s.head_dim;
  st.head = st.token * s.tokens;
  st.kind = st.head * s.kv_heads;
  st.layer = st.kind * 2;
  return st;
}

namespace {
Status ValidateCommon(const void* data, const KvShape& s, const KvStrides& st) {
  if (data == nullptr) return Status::InvalidArgument("KV view has null data");
  if (s.layers <= 0 || s.kv_heads <= 0 || s.tokens <= 0 || s.head_dim <= 0)
    return Status::InvalidArgument("KV view shape must be positive in every axis");
  if (st.layer < 0 || st.kind < 0 || st.head < 0 || st.token < 0 || st.dim < 0)
    return Status::InvalidArgument("KV view strides must be non-negative");
  return Status::Ok();
}
}  // namespace

Status KvView::Validate() const { return ValidateCommon(data, shape, strides); }
Status MutableKvView::Validate() const { return ValidateCommon(data, shape, strides); }

void KvCache::Free::operator()(std::byte* p) const { std::free(p); }

KvCache::KvCache(DType dtype, const KvShape& shape)
    : dtype_(dtype), shape_(shape), size_(static_cast<size_t>(shape.NumElements()) * DTypeSize(dtype)) {
  if (size_ == 0) return;
  storage_.reset(static_cast<std::byte*>(std::calloc(size_, 1)));
  if (!storage_) throw std::bad_alloc();
}

KvView KvCache::view() const {
  return KvView{storage_.get(), dtype_, shape_, KvStrides::Contiguous(shape_)};
}

MutableKvView KvCache::mutable_view() {
  return MutableKvView{storage_.get(), dtype_, shape_, KvStrides::Contiguous(shape_)};
}

Result<KvCache> KvCache::CopyFrom(const KvView& v) {
  KVSERVE_RETURN_IF_ERROR(v.Validate());
  KvCache out(v.dtype, v.shape);
  const size_t es = DTypeSize(v.dtype);
  MutableKvView o = out.mutable_view();
  for (int l = 0; l < v.shape.layers; ++l)
    for (int k = 0; k < 2; ++k)
      for (int h = 0; h < v.shape.kv_heads; ++h)
        for (int t = 0; t < v.shape.tokens; ++t) {
          std::byte* dst = o.At(l, k, h, t, 0);
          if (v.strides.dim == 1) {
            std::memcpy(dst, v.At(l, k, h, t, 0), es * v.shape.head_dim);
          } else {
            for (int d = 0; d < v.shape.head_dim; ++d)
              std::memcpy(dst + d * es, v.At(l, k, h, t, d), es);
          }
        }
  return out;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) {  // inf or nan
    return sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0);
  }
  if (absx >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {  // below fp16 normal range: subnormal or zero
    if (absx < 0x33000000u) return sign;  // < 2^-25 rounds to 0
    // value = m * 2^(e-150) with the implicit bit in m; the fp16 subnormal
    // unit is 2^-24, so the code is m >> (126 - e), rounded to nearest even.
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits (RNE).
  uint32_t r = absx - ((127 - 15) << 23);
  const uint32_t rem = r & 0x1FFFu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return sign | static_cast<uint16_t>(r);
}

float BFloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7FFFu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

float LoadAsFloat(const std::byte* src, DType dtype) {
  switch (dtype) {
    case DType::kF32: { float f; std::memcpy(&f, src, 4); return f; }
    case DType::kF16: { uint16_t h; std::memcpy(&h, src, 2); return HalfToFloat(h); }
    case DType::kBF16: { uint16_t h; std::memcpy(&h, src, 2); return BFloat16ToFloat(h); }
  }
  return 0.0f;
}

void StoreFromFloat(float v, std::byte* dst, DType dtype) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, &v, 4); return;
    case DType::kF16: { uint16_t h = FloatToHalf(v); std::memcpy(dst, &h, 2); return; }
    case DType::kBF16: { uint16_t h = FloatToBFloat16(v); std::memcpy(dst, &h, 2); return; }
  }
}

}  // namespace kvserve
