#include "pipeline/gather.h"

#include <immintrin.h>

#include <cstring>

#include "core/cpu_features.h"

namespace kvserve::pipeline {
namespace {

bool HasF16C() { return CpuHasAvx2AndF16c(); }

// Row conversions: n contiguous source elements <-> n floats.
__attribute__((target("avx2,f16c"))) void HalfRowToFloatAvx2(const uint16_t* src, float* dst,
                                                             int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

__attribute__((target("avx2"))) void BF16RowToFloatAvx2(const uint16_t* src, float* dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) dst[i] = BFloat16ToFloat(src[i]);
}

// Round-to-nearest-even like FloatToHalf. F16C's conversion is IEEE RNE for
// every finite input, including subnormal results; the decoder only emits
// finite values, and NaN inputs take the scalar path's quiet-NaN result
// modulo payload (documented in docs/format.md).
// Stores 16 bytes at p, around the caches (a non-temporal store) when `nt`
// (p must then be 16-byte aligned).
__attribute__((target("avx2"))) inline void Store16(uint16_t* p, __m128i v, bool nt) {
  if (nt) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), v);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Copies n bytes; with `stream`, the 16-byte-aligned body of dst is written
// with non-temporal stores.
__attribute__((target("avx2"))) void CopyBytes(void* dst, const void* src, size_t n, bool stream) {
  if (!stream || n < 64) {
    std::memcpy(dst, src, n);
    return;
  }
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 16 <= n; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  }
  std::memcpy(d + i, s + i, n - i);
}

__attribute__((target("avx2,f16c"))) void FloatRowToHalfAvx2(const float* src, uint16_t* dst, int n,
                                                             bool stream) {
  const bool nt = stream && Aligned16(dst);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    Store16(dst + i, h, nt);
  }
  for (; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}

__attribute__((target("avx2"))) void FloatRowToBF16Avx2(const float* src, uint16_t* dst, int n,
                                                        bool stream) {
  const bool nt = stream && Aligned16(dst);
  int i = 0;
  const __m256i bias = _mm256_set1_epi32(0x7FFF);
  const __m256i one = _mm256_set1_epi32(1);
  for (; i + 8 <= n; i += 8) {
    __m256 f = _mm256_loadu_ps(src + i);
    __m256i x = _mm256_castps_si256(f);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
    // NaN lanes: keep the scalar path's quiet NaN.
    __m256 isnan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
    __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(isnan));
    __m128i lo = _mm256_castsi256_si128(r);
    __m128i hi = _mm256_extracti128_si256(r, 1);
    Store16(dst + i, _mm_packus_epi32(lo, hi), nt);
  }
  for (; i < n; ++i) dst[i] = FloatToBFloat16(src[i]);
}

void RowToFloat(const std::byte* src, DType dtype, float* dst, int n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, sizeof(float) * n);
      return;
    case DType::kF16:
      if (HasF16C()) return HalfRowToFloatAvx2(reinterpret_cast<const uint16_t*>(src), dst, n);
      for (int i = 0; i < n; ++i) dst[i] = LoadAsFloat(src + 2 * i, dtype);
      return;
    case DType::kBF16:
      if (HasF16C()) return BF16RowToFloatAvx2(reinterpret_cast<const uint16_t*>(src), dst, n);
      for (int i = 0; i < n; ++i) dst[i] = LoadAsFloat(src + 2 * i, dtype);
      return;
  }
}

void FloatToRow(const float* src, DType dtype, std::byte* dst, int n, bool stream) {
  switch (dtype) {
    case DType::kF32:
      if (HasF16C()) return CopyBytes(dst, src, sizeof(float) * n, stream);
      std::memcpy(dst, src, sizeof(float) * n);
      return;
    case DType::kF16:
      if (HasF16C()) return FloatRowToHalfAvx2(src, reinterpret_cast<uint16_t*>(dst), n, stream);
      for (int i = 0; i < n; ++i) StoreFromFloat(src[i], dst + 2 * i, dtype);
      return;
    case DType::kBF16:
      if (HasF16C()) return FloatRowToBF16Avx2(src, reinterpret_cast<uint16_t*>(dst), n, stream);
      for (int i = 0; i < n; ++i) StoreFromFloat(src[i], dst + 2 * i, dtype);
      return;
  }
}

void GatherRowsStrided(const KvView& kv, int layer, int kind, int head, int token, int count,
                       float* out) {
  const int dim = kv.shape.head_dim;
  const std::byte* src = kv.At(layer, kind, head, token, 0);
  const int64_t token_bytes = kv.strides.token * static_cast<int64_t>(DTypeSize(kv.dtype));
  for (int t = 0; t < count; ++t, src += token_bytes) {
    float* row = out + static_cast<size_t>(t) * dim;
    if (kv.strides.dim == 1) {
      RowToFloat(src, kv.dtype, row, dim);
    } else {
      for (int d = 0; d < dim; ++d)
        row[d] = LoadAsFloat(kv.At(layer, kind, head, token + t, d), kv.dtype);
    }
  }
}

void ScatterRowsStrided(const float* in, const MutableKvView& out, int layer, int kind, int head,
                        int token, int count, bool stream) {
  const int dim = out.shape.head_dim;
  std::byte* dst = out.At(layer, kind, head, token, 0);
  const int64_t token_bytes = out.strides.token * static_cast<int64_t>(DTypeSize(out.dtype));
  for (int t = 0; t < count; ++t, dst += token_bytes) {
    const float* row = in + static_cast<size_t>(t) * dim;
    if (out.strides.dim == 1) {
      FloatToRow(row, out.dtype, dst, dim, stream);
    } else {
      for (int d = 0; d < dim; ++d)
        StoreFromFloat(row[d], out.At(layer, kind, head, token + t, d), out.dtype);
    }
  }
}

void ZeroRowsStrided(const MutableKvView& out, int layer, int kind, int head, int token,
                     int count) {
  const size_t es = DTypeSize(out.dtype);
  const int dim = out.shape.head_dim;
  for (int t = 0; t < count; ++t) {
    if (out.strides.dim == 1) {
      std::memset(out.At(layer, kind, head, token + t, 0), 0, es * dim);
    } else {
      for (int d = 0; d < dim; ++d) std::memset(out.At(layer, kind, head, token + t, d), 0, es);
    }
  }
}

// Copies head `head`'s rows [token, token + count) of (layer, kind) of `kv`,
// as source-dtype bytes, densely into `out`.
void GatherRawRowsStrided(const KvView& kv, int layer, int kind, int head, int token, int count,
                          uint8_t* out) {
  const size_t es = DTypeSize(kv.dtype);
  const int dim = kv.shape.head_dim;
  for (int t = 0; t < count; ++t) {
    uint8_t* row = out + static_cast<size_t>(t) * dim * es;
    if (kv.strides.dim == 1) {
      std::memcpy(row, kv.At(layer, kind, head, token + t, 0), es * dim);
    } else {
      for (int d = 0; d < dim; ++d)
        std::memcpy(row + d * es, kv.At(layer, kind, head, token + t, d), es);
    }
  }
}

// Inverse of GatherRawRowsStrided; `stream` as for ScatterRows.
void ScatterRawRowsStrided(const uint8_t* in, const MutableKvView& out, int layer, int kind,
                           int head, int token, int count, bool stream) {
  const size_t es = DTypeSize(out.dtype);
  const int dim = out.shape.head_dim;
  for (int t = 0; t < count; ++t) {
    const uint8_t* row = in + static_cast<size_t>(t) * dim * es;
    if (out.strides.dim == 1) {
      CopyBytes(out.At(layer, kind, head, token + t, 0), row, es * dim, stream);
    } else {
      for (int d = 0; d < dim; ++d)
        std::memcpy(out.At(layer, kind, head, token + t, d), row + d * es, es);
    }
  }
}

}  // namespace

bool PreferStreamingStores(const KvTarget& out) {
  return HasF16C() && out.shape().NumElements() * static_cast<int64_t>(DTypeSize(out.dtype())) >=
                          kStreamingStoreMinBytes;
}

void FinishStreamingStores() { _mm_sfence(); }

void GatherRows(const KvSource& kv, int layer, int kind, int head, int token, int count,
                float* out) {
  const size_t dim = static_cast<size_t>(kv.shape().head_dim);
  kv.ForEachRun(layer, kind, token, count,
                [&](const KvView& v, int l, int k, int t, int n, int at) {
                  GatherRowsStrided(v, l, k, head, t, n, out + at * dim);
                });
}

void ScatterRows(const float* in, const KvTarget& out, int layer, int kind, int head, int token,
                 int count, bool stream) {
  const size_t dim = static_cast<size_t>(out.shape().head_dim);
  out.ForEachRun(layer, kind, token, count,
                 [&](const MutableKvView& v, int l, int k, int t, int n, int at) {
                   ScatterRowsStrided(in + at * dim, v, l, k, head, t, n, stream);
                 });
}

void ZeroRows(const KvTarget& out, int layer, int kind, int head, int token, int count) {
  out.ForEachRun(layer, kind, token, count,
                 [&](const MutableKvView& v, int l, int k, int t, int n, int) {
                   ZeroRowsStrided(v, l, k, head, t, n);
                 });
}

void GatherChunk(const KvSource& kv, int layer, int kind, int token_begin, int tokens, float* out) {
  const int dim = kv.shape().head_dim;
  for (int h = 0; h < kv.shape().kv_heads; ++h) {
    GatherRows(kv, layer, kind, h, token_begin, tokens,
               out + static_cast<size_t>(h) * tokens * dim);
  }
}

void ScatterChunk(const float* in, const KvTarget& out, int layer, int kind, int token_begin,
                  int tokens) {
  const int dim = out.shape().head_dim;
  for (int h = 0; h < out.shape().kv_heads; ++h) {
    ScatterRows(in + static_cast<size_t>(h) * tokens * dim, out, layer, kind, h, token_begin,
                tokens, /*stream=*/false);
  }
}

void GatherRawBytes(const KvSource& kv, int layer, int kind, int token_begin, int tokens,
                    uint8_t* out) {
  const size_t row_bytes = DTypeSize(kv.dtype()) * kv.shape().head_dim;
  for (int h = 0; h < kv.shape().kv_heads; ++h) {
    uint8_t* head_out = out + static_cast<size_t>(h) * tokens * row_bytes;
    kv.ForEachRun(layer, kind, token_begin, tokens,
                  [&](const KvView& v, int l, int k, int t, int n, int at) {
                    GatherRawRowsStrided(v, l, k, h, t, n, head_out + at * row_bytes);
                  });
  }
}

void ScatterRawBytes(const uint8_t* in, const KvTarget& out, int layer, int kind, int token_begin,
                     int tokens, bool stream) {
  const size_t row_bytes = DTypeSize(out.dtype()) * out.shape().head_dim;
  stream = stream && HasF16C();
  for (int h = 0; h < out.shape().kv_heads; ++h) {
    const uint8_t* head_in = in + static_cast<size_t>(h) * tokens * row_bytes;
    out.ForEachRun(layer, kind, token_begin, tokens,
                   [&](const MutableKvView& v, int l, int k, int t, int n, int at) {
                     ScatterRawRowsStrided(head_in + at * row_bytes, v, l, k, h, t, n, stream);
                   });
  }
}

}  // namespace kvserve::pipeline
