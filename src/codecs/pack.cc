// Copyright kvserve authors. Fixed-width bit packing; layout in pack.h.
//
// The scalar code packs and unpacks groups of 8 symbols (8 symbols of b bits
// are exactly b bytes) with the width as a template constant. The AVX2 code
// handles 32 symbols per step (b in {1, 2, 4} with dedicated shuffles, odd
// widths with a generic merge/gather) and leaves the ragged end to the scalar
// code; every block it handles ends on a byte boundary, so the two compose
// without shifting.
#include "codecs/pack.h"

#include <algorithm>
#include <cstring>
#include <string>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define KVSERVE_CODECS_X86 1
#endif

namespace kvserve::codecs {
namespace {

// ------------------------------------------------------------------ scalar

template <int B>
void PackScalarT(const uint8_t* symbols, size_t count, uint8_t* out) {
  static_assert(B >= 1 && B <= 8);
  if constexpr (B == 8) {
    if (count) std::memcpy(out, symbols, count);
    return;
  } else {
    size_t i = 0;
    for (; i + 8 <= count; i += 8) {
      uint64_t v = 0;
      for (int k = 0; k < 8; ++k) v |= uint64_t{symbols[i + k]} << (k * B);
      std::memcpy(out, &v, B);  // little-endian host
      out += B;
    }
    const size_t rest = count - i;
    if (rest) {
      uint64_t v = 0;
      for (size_t k = 0; k < rest; ++k) v |= uint64_t{symbols[i + k]} << (k * B);
      std::memcpy(out, &v, (rest * B + 7) / 8);
    }
  }
}

template <int B>
void UnpackScalarT(const uint8_t* in, size_t count, uint8_t* out) {
  static_assert(B >= 1 && B <= 8);
  if constexpr (B == 8) {
    if (count) std::memcpy(out, in, count);
    return;
  } else {
    constexpr uint64_t kMask = (uint64_t{1} << B) - 1;
    size_t i = 0;
    // Odd widths: while 8 input bytes remain, load a whole word (only its
    // low B bytes are used) and store the 8 symbols as one word; a B-byte
    // memcpy costs several partial loads (measured 3x slower for B = 3).
    const size_t total = (B == 1 || B == 2 || B == 4) ? 0 : PackedSize(count, B);
    for (; i + 8 <= count && (i / 8) * B + 8 <= total; i += 8) {
      uint64_t v, symbols8 = 0;
      std::memcpy(&v, in, 8);
      in += B;
      for (int k = 0; k < 8; ++k) symbols8 |= ((v >> (k * B)) & kMask) << (8 * k);
      std::memcpy(out + i, &symbols8, 8);
    }
    for (; i + 8 <= count; i += 8) {
      uint64_t v = 0;
      std::memcpy(&v, in, B);
      in += B;
      for (int k = 0; k < 8; ++k) out[i + k] = static_cast<uint8_t>((v >> (k * B)) & kMask);
    }
    const size_t rest = count - i;
    if (rest) {
      uint64_t v = 0;
      std::memcpy(&v, in, (rest * B + 7) / 8);
      for (size_t k = 0; k < rest; ++k) out[i + k] = static_cast<uint8_t>((v >> (k * B)) & kMask);
    }
  }
}

void PackScalar(const uint8_t* symbols, size_t count, int bits, uint8_t* out) {
  switch (bits) {
    case 1: return PackScalarT<1>(symbols, count, out);
    case 2: return PackScalarT<2>(symbols, count, out);
    case 3: return PackScalarT<3>(symbols, count, out);
    case 4: return PackScalarT<4>(symbols, count, out);
    case 5: return PackScalarT<5>(symbols, count, out);
    case 6: return PackScalarT<6>(symbols, count, out);
    case 7: return PackScalarT<7>(symbols, count, out);
    default: return PackScalarT<8>(symbols, count, out);
  }
}

void UnpackScalar(const uint8_t* in, size_t count, int bits, uint8_t* out) {
  switch (bits) {
    case 1: return UnpackScalarT<1>(in, count, out);
    case 2: return UnpackScalarT<2>(in, count, out);
    case 3: return UnpackScalarT<3>(in, count, out);
    case 4: return UnpackScalarT<4>(in, count, out);
    case 5: return UnpackScalarT<5>(in, count, out);
    case 6: return UnpackScalarT<6>(in, count, out);
    case 7: return UnpackScalarT<7>(in, count, out);
    default: return UnpackScalarT<8>(in, count, out);
  }
}

uint8_t MaxScalar(const uint8_t* p, size_t n) {
  uint8_t m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, p[i]);
  return m;
}

// -------------------------------------------------------------------- AVX2
#if KVSERVE_CODECS_X86

// Odd widths B in {3, 5, 6, 7}, 32 symbols (4B bytes) per iteration.
// Packing merges neighbours pairwise (8 -> 16 -> 32 -> 64-bit fields) and
// compacts each qword's low B bytes; the 16-byte stores spill zeros past the
// 4B bytes written, which later iterations or the scalar tail overwrite, so
// the loop stops 16 bytes before the end of the output.
template <int B>
__attribute__((target("avx2"))) size_t PackAvx2Odd(const uint8_t* symbols, size_t count,
                                                   uint8_t* out) {
  const size_t total = PackedSize(count, B);
  const __m256i lo8 = _mm256_set1_epi16(0x00FF);
  const __m256i hi8 = _mm256_set1_epi16(static_cast<int16_t>(((1 << B) - 1) << B));
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
  const __m256i hi16 = _mm256_set1_epi32(((1 << (2 * B)) - 1) << (2 * B));
  const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFFLL);
  const __m256i hi32 = _mm256_set1_epi64x(((int64_t{1} << (4 * B)) - 1) << (4 * B));
  alignas(32) int8_t compact[32];
  for (int k = 0; k < 16; ++k) {
    compact[k] = compact[16 + k] = static_cast<int8_t>(k < B ? k : k < 2 * B ? 8 + k - B : -1);
  }
  const __m256i pick = _mm256_load_si256(reinterpret_cast<const __m256i*>(compact));
  size_t i = 0;
  for (; i + 32 <= count && (i / 8) * B + 2 * B + 16 <= total; i += 32) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(symbols + i));
    v = _mm256_or_si256(_mm256_and_si256(v, lo8),
                        _mm256_and_si256(_mm256_srli_epi16(v, 8 - B), hi8));
    v = _mm256_or_si256(_mm256_and_si256(v, lo16),
                        _mm256_and_si256(_mm256_srli_epi32(v, 16 - 2 * B), hi16));
    v = _mm256_or_si256(_mm256_and_si256(v, lo32),
                        _mm256_and_si256(_mm256_srli_epi64(v, 32 - 4 * B), hi32));
    v = _mm256_shuffle_epi8(v, pick);
    uint8_t* o = out + (i / 8) * B;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm256_castsi256_si128(v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * B), _mm256_extracti128_si256(v, 1));
  }
  return i;
}

// 16 symbols of width B: 8 from p and 8 from p + B, as 16-bit lanes.
template <int B>
__attribute__((target("avx2"))) inline __m256i SixteenOdd(const uint8_t* p, __m256i pick,
                                                          __m256i mul, __m256i mask) {
  __m256i x = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + B)), 1);
  x = _mm256_mullo_epi16(_mm256_shuffle_epi8(x, pick), mul);
  return _mm256_and_si256(_mm256_srli_epi16(x, 8), mask);
}

// Unpacking gathers, for every symbol, the two bytes holding its bits into a
// 16-bit lane, shifts its first bit to bit 8 with a multiply (x << (8 - s))
// and keeps the high byte. Reads 16 bytes at offset 3B of each 4B-byte block.
template <int B>
__attribute__((target("avx2"))) size_t UnpackAvx2Odd(const uint8_t* in, size_t count,
                                                     uint8_t* out) {
  const size_t total = PackedSize(count, B);
  alignas(32) int8_t gather[32];
  alignas(32) int16_t shift[16];
  for (int j = 0; j < 8; ++j) {
    const int bit = j * B;
    gather[2 * j] = gather[16 + 2 * j] = static_cast<int8_t>(bit / 8);
    gather[2 * j + 1] = gather[16 + 2 * j + 1] = static_cast<int8_t>(bit / 8 + 1);
    shift[j] = shift[8 + j] = static_cast<int16_t>(1 << (8 - bit % 8));
  }
  const __m256i pick = _mm256_load_si256(reinterpret_cast<const __m256i*>(gather));
  const __m256i mul = _mm256_load_si256(reinterpret_cast<const __m256i*>(shift));
  const __m256i mask = _mm256_set1_epi16((1 << B) - 1);
  size_t i = 0;
  for (; i + 32 <= count && (i / 8) * B + 3 * B + 16 <= total; i += 32) {
    const uint8_t* p = in + (i / 8) * B;
    __m256i v = _mm256_packus_epi16(SixteenOdd<B>(p, pick, mul, mask),
                                    SixteenOdd<B>(p + 2 * B, pick, mul, mask));
    v = _mm256_permute4x64_epi64(v, 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), v);
  }
  return i;
}

// Returns the number of symbols handled (a multiple of 32); the caller packs
// the rest with the scalar code at byte offset handled * bits / 8.
__attribute__((target("avx2"))) size_t PackAvx2(const uint8_t* symbols, size_t count, int bits,
                                                uint8_t* out) {
  size_t i = 0;
  if (bits == 1) {
    for (; i + 32 <= count; i += 32) {
      __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(symbols + i));
      // Bit 0 of every byte to bit 7; movemask gathers them in symbol order.
      uint32_t m = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_slli_epi16(v, 7)));
      std::memcpy(out + i / 8, &m, 4);
    }
  } else if (bits == 2) {
    const __m256i w8 = _mm256_set1_epi16(0x0401);        // s0 + 4*s1
    const __m256i w16 = _mm256_set1_epi32(0x00100001);   // p0 + 16*p1
    // Byte 0 of every 32-bit element, per 128-bit lane, into the low dword.
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          -1, -1);
    const __m256i gather = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
    for (; i + 32 <= count; i += 32) {
      __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(symbols + i));
      __m256i t = _mm256_madd_epi16(_mm256_maddubs_epi16(v, w8), w16);
      t = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(t, pick), gather);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i / 4), _mm256_castsi256_si128(t));
    }
  } else if (bits == 3) {
    return PackAvx2Odd<3>(symbols, count, out);
  } else if (bits == 5) {
    return PackAvx2Odd<5>(symbols, count, out);
  } else if (bits == 6) {
    return PackAvx2Odd<6>(symbols, count, out);
  } else if (bits == 7) {
    return PackAvx2Odd<7>(symbols, count, out);
  } else if (bits == 4) {
    const __m256i w8 = _mm256_set1_epi16(0x1001);  // s0 + 16*s1
    for (; i + 32 <= count; i += 32) {
      __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(symbols + i));
      __m256i t = _mm256_maddubs_epi16(v, w8);
      t = _mm256_permute4x64_epi64(_mm256_packus_epi16(t, t), 0x08);  // qwords 0, 2
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i / 2), _mm256_castsi256_si128(t));
    }
  }
  return i;
}

__attribute__((target("avx2"))) size_t UnpackAvx2(const uint8_t* in, size_t count, int bits,
                                                  uint8_t* out) {
  size_t i = 0;
  if (bits == 1) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
    const __m256i one = _mm256_set1_epi8(1);
    for (; i + 32 <= count; i += 32) {
      uint32_t m;
      std::memcpy(&m, in + i / 8, 4);
      __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(m)), spread);
      v = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), one);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), v);
    }
  } else if (bits == 2) {
    const __m128i m2 = _mm_set1_epi8(3);
    for (; i + 64 <= count; i += 64) {
      __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i / 4));
      __m128i a = _mm_and_si128(x, m2);
      __m128i b = _mm_and_si128(_mm_srli_epi16(x, 2), m2);
      __m128i c = _mm_and_si128(_mm_srli_epi16(x, 4), m2);
      __m128i d = _mm_and_si128(_mm_srli_epi16(x, 6), m2);
      __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
      __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
      auto* o = reinterpret_cast<__m128i*>(out + i);
      _mm_storeu_si128(o + 0, _mm_unpacklo_epi16(ab_lo, cd_lo));
      _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(ab_lo, cd_lo));
      _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(ab_hi, cd_hi));
      _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(ab_hi, cd_hi));
    }
  } else if (bits == 3) {
    return UnpackAvx2Odd<3>(in, count, out);
  } else if (bits == 5) {
    return UnpackAvx2Odd<5>(in, count, out);
  } else if (bits == 6) {
    return UnpackAvx2Odd<6>(in, count, out);
  } else if (bits == 7) {
    return UnpackAvx2Odd<7>(in, count, out);
  } else if (bits == 4) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (; i + 32 <= count; i += 32) {
      __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i / 2));
      __m128i lo = _mm_and_si128(x, m4);
      __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), m4);
      auto* o = reinterpret_cast<__m128i*>(out + i);
      _mm_storeu_si128(o + 0, _mm_unpacklo_epi8(lo, hi));
      _mm_storeu_si128(o + 1, _mm_unpackhi_epi8(lo, hi));
    }
  }
  return i;
}

__attribute__((target("avx2"))) uint8_t MaxAvx2(const uint8_t* p, size_t n) {
  __m256i m = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m = _mm256_max_epu8(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
  }
  alignas(32) uint8_t lanes[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), m);
  return std::max(MaxScalar(lanes, 32), MaxScalar(p + i, n - i));
}

#endif  // KVSERVE_CODECS_X86

bool UseAvx2(PackImpl impl) {
#if KVSERVE_CODECS_X86
  if (impl == PackImpl::kAvx2) return true;
  if (impl == PackImpl::kBest) return CpuHasAvx2();
#endif
  (void)impl;
  return false;
}

uint8_t MaxSymbol(const uint8_t* p, size_t n, PackImpl impl) {
#if KVSERVE_CODECS_X86
  if (UseAvx2(impl)) return MaxAvx2(p, n);
#endif
  return MaxScalar(p, n);
}

}  // namespace

bool CpuHasAvx2() {
#if KVSERVE_CODECS_X86
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

void PackSymbols(const uint8_t* symbols, size_t count, int bits, uint8_t* out, PackImpl impl) {
  size_t done = 0;
#if KVSERVE_CODECS_X86
  if (UseAvx2(impl)) done = PackAvx2(symbols, count, bits, out);
#endif
  PackScalar(symbols + done, count - done, bits, out + done * bits / 8);
}

Status UnpackSymbols(std::span<const uint8_t> in, int bits, size_t count, uint16_t levels,
                     uint8_t* out, PackImpl impl) {
  if (bits < 1 || bits > 8 || levels < 2 || levels > (1u << bits)) {
    return Status::Corruption("pack: levels " + std::to_string(levels) + " do not fit " +
                              std::to_string(bits) + " bits");
  }
  if (count > kMaxSegmentSymbols) return Status::Corruption("pack: symbol count too large");
  const size_t expected = PackedSize(count, bits);
  if (in.size() != expected) {
    return Status::Corruption("pack: " + std::to_string(in.size()) + " bytes, expected " +
                              std::to_string(expected));
  }
  const unsigned tail_bits = static_cast<unsigned>((count * bits) % 8);
  if (tail_bits != 0 && (in[expected - 1] >> tail_bits) != 0) {
    return Status::Corruption("pack: nonzero padding bits in final byte");
  }
  size_t done = 0;
#if KVSERVE_CODECS_X86
  if (UseAvx2(impl)) done = UnpackAvx2(in.data(), count, bits, out);
#endif
  UnpackScalar(in.data() + done * bits / 8, count - done, bits, out + done);
  if (levels != (1u << bits) && count > 0 && MaxSymbol(out, count, impl) >= levels) {
    return Status::Corruption("pack: symbol >= levels " + std::to_string(levels));
  }
  return Status::Ok();
}

Status ValidateSegment(const pipeline::CodeSegment& segment) {
  if (segment.levels < 2 || segment.levels > 256) {
    return Status::InvalidArgument("codec: levels " + std::to_string(segment.levels) +
                                   " outside [2, 256]");
  }
  if (segment.symbols.size() > kMaxSegmentSymbols) {
    return Status::InvalidArgument("codec: segment too large");
  }
  if (segment.levels < 256 && !segment.symbols.empty() &&
      MaxSymbol(segment.symbols.data(), segment.symbols.size(), PackImpl::kBest) >=
          segment.levels) {
    return Status::InvalidArgument("codec: symbol >= levels " + std::to_string(segment.levels));
  }
  return Status::Ok();
}

Status ValidateDecodeShape(uint16_t levels, size_t count) {
  if (levels < 2 || levels > 256) {
    return Status::Corruption("codec: levels " + std::to_string(levels) + " outside [2, 256]");
  }
  if (count > kMaxSegmentSymbols) return Status::Corruption("codec: symbol count too large");
  return Status::Ok();
}

Status PackCodec::Encode(const pipeline::CodeSegment& segment, std::vector<uint8_t>* out) const {
  KVSERVE_RETURN_IF_ERROR(ValidateSegment(segment));
  const int bits = pipeline::BitsForLevels(segment.levels);
  const size_t n = segment.symbols.size();
  const size_t start = out->size();
  out->resize(start + PackedSize(n, bits));
  PackSymbols(segment.symbols.data(), n, bits, out->data() + start, impl_);
  return Status::Ok();
}

Status PackCodec::Decode(std::span<const uint8_t> in, uint16_t levels, size_t count,
                         uint8_t* out) const {
  KVSERVE_RETURN_IF_ERROR(ValidateDecodeShape(levels, count));
  return UnpackSymbols(in, pipeline::BitsForLevels(levels), count, levels, out, impl_);
}

}  // namespace kvserve::codecs
