// Copyright kvserve authors. XXH3-64 (seed 0, default secret) on the GPU,
// written from the xxHash specification / libxxhash 0.8 reference code:
// a scalar version (host and device; every length) and the pieces of the
// parallel form of long inputs (> 240 bytes) that record_hash.cuh runs with
// a whole thread block. The accumulator update is a sum of per-stripe terms
// mod 2^64, so any order of the additions gives the reference's bits; the
// nonlinear scramble runs once per block, in order. test_cuda checks both
// against libxxhash.
#ifndef KVSERVE_CUDA_XXH3_CUH_
#define KVSERVE_CUDA_XXH3_CUH_

#include <cstdint>

#include "cuda/common.cuh"

namespace kvserve::cuda::xxh3 {

inline constexpr uint64_t kPrime32_1 = 0x9E3779B1u;
inline constexpr uint64_t kPrime32_2 = 0x85EBCA77u;
inline constexpr uint64_t kPrime32_3 = 0xC2B2AE3Du;
inline constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ull;
inline constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4Full;
inline constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ull;
inline constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ull;
inline constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ull;

#define KVSERVE_XXH3_SECRET                                                                     \
  {0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, \
   0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, \
   0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, \
   0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, \
   0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, \
   0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, \
   0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, \
   0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, \
   0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, \
   0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, \
   0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, \
   0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e}

// The secret's little-endian u64 at byte offset o (0 <= o <= 184), through a
// byte table in host or device constant storage.
struct Secret {
  const uint8_t* bytes;
  KV_HD uint64_t U64(int o) const {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | bytes[o + i];
    return v;
  }
  KV_HD uint32_t U32(int o) const {
    return static_cast<uint32_t>(bytes[o]) | (static_cast<uint32_t>(bytes[o + 1]) << 8) |
           (static_cast<uint32_t>(bytes[o + 2]) << 16) | (static_cast<uint32_t>(bytes[o + 3]) << 24);
  }
};

KV_HD uint64_t ReadLE64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
KV_HD uint32_t ReadLE32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
KV_HD uint64_t Rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
KV_HD uint64_t Swap64(uint64_t x) {
  x = ((x << 8) & 0xFF00FF00FF00FF00ull) | ((x >> 8) & 0x00FF00FF00FF00FFull);
  x = ((x << 16) & 0xFFFF0000FFFF0000ull) | ((x >> 16) & 0x0000FFFF0000FFFFull);
  return (x << 32) | (x >> 32);
}
KV_HD uint64_t MulFold64(uint64_t a, uint64_t b) {
#ifdef __CUDA_ARCH__
  return (a * b) ^ __umul64hi(a, b);
#else
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
#endif
}
KV_HD uint64_t Avalanche64(uint64_t h) {  // XXH64_avalanche
  h ^= h >> 33;
  h *= kPrime64_2;
  h ^= h >> 29;
  h *= kPrime64_3;
  h ^= h >> 32;
  return h;
}
KV_HD uint64_t Avalanche3(uint64_t h) {  // XXH3_avalanche
  h ^= h >> 37;
  h *= 0x165667919E3779F9ull;
  h ^= h >> 32;
  return h;
}
KV_HD uint64_t Rrmxmx(uint64_t h, uint64_t len) {
  h ^= Rotl64(h, 49) ^ Rotl64(h, 24);
  h *= 0x9FB21C651E98DF25ull;
  h ^= (h >> 35) + len;
  h *= 0x9FB21C651E98DF25ull;
  return h ^ (h >> 28);
}
KV_HD uint64_t Mix16(const uint8_t* in, const Secret& s, int so) {
  return MulFold64(ReadLE64(in) ^ s.U64(so), ReadLE64(in + 8) ^ s.U64(so + 8));
}

// One 64-byte stripe into the accumulators.
KV_HD void Accumulate512(uint64_t acc[8], const uint8_t* in, const Secret& s, int so) {
  for (int i = 0; i < 8; ++i) {
    const uint64_t data = ReadLE64(in + 8 * i);
    const uint64_t key = data ^ s.U64(so + 8 * i);
    acc[i ^ 1] += data;
    acc[i] += (key & 0xFFFFFFFFull) * (key >> 32);
  }
}
KV_HD uint64_t ScrambleOne(uint64_t a, uint64_t key) {
  a ^= a >> 47;
  a ^= key;
  a *= kPrime32_1;
  return a;
}

KV_HD uint64_t MergeAccs(const uint64_t acc[8], const Secret& s, uint64_t len) {
  uint64_t r = len * kPrime64_1;
  for (int i = 0; i < 4; ++i)
    r += MulFold64(acc[2 * i] ^ s.U64(11 + 16 * i), acc[2 * i + 1] ^ s.U64(11 + 16 * i + 8));
  return Avalanche3(r);
}

// XXH3_64bits(in, len), seed 0. Scalar; any length.
KV_HD uint64_t Hash64(const uint8_t* in, uint64_t len, const Secret& s) {
  if (len <= 16) {
    if (len > 8) {
      const uint64_t lo = ReadLE64(in) ^ (s.U64(24) ^ s.U64(32));
      const uint64_t hi = ReadLE64(in + len - 8) ^ (s.U64(40) ^ s.U64(48));
      return Avalanche3(len + Swap64(lo) + hi + MulFold64(lo, hi));
    }
    if (len >= 4) {
      const uint32_t in1 = ReadLE32(in), in2 = ReadLE32(in + len - 4);
      const uint64_t in64 = in2 + (static_cast<uint64_t>(in1) << 32);
      return Rrmxmx(in64 ^ (s.U64(8) ^ s.U64(16)), len);
    }
    if (len > 0) {
      const uint32_t c = (static_cast<uint32_t>(in[0]) << 16) |
                         (static_cast<uint32_t>(in[len >> 1]) << 24) |
                         static_cast<uint32_t>(in[len - 1]) | (static_cast<uint32_t>(len) << 8);
      return Avalanche64(static_cast<uint64_t>(c) ^ static_cast<uint64_t>(s.U32(0) ^ s.U32(4)));
    }
    return Avalanche64(s.U64(56) ^ s.U64(64));
  }
  if (len <= 128) {
    uint64_t acc = len * kPrime64_1;
    if (len > 32) {
      if (len > 64) {
        if (len > 96) {
          acc += Mix16(in + 48, s, 96);
          acc += Mix16(in + len - 64, s, 112);
        }
        acc += Mix16(in + 32, s, 64);
        acc += Mix16(in + len - 48, s, 80);
      }
      acc += Mix16(in + 16, s, 32);
      acc += Mix16(in + len - 32, s, 48);
    }
    acc += Mix16(in, s, 0);
    acc += Mix16(in + len - 16, s, 16);
    return Avalanche3(acc);
  }
  if (len <= 240) {
    uint64_t acc = len * kPrime64_1;
    const int rounds = static_cast<int>(len / 16);
    for (int i = 0; i < 8; ++i) acc += Mix16(in + 16 * i, s, 16 * i);
    acc = Avalanche3(acc);
    for (int i = 8; i < rounds; ++i) acc += Mix16(in + 16 * i, s, 16 * (i - 8) + 3);
    acc += Mix16(in + len - 16, s, 136 - 17);
    return Avalanche3(acc);
  }
  uint64_t acc[8] = {kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3,
                     kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1};
  const uint64_t block_len = 1024;
  const uint64_t blocks = (len - 1) / block_len;
  for (uint64_t b = 0; b < blocks; ++b) {
    for (int st = 0; st < 16; ++st) Accumulate512(acc, in + b * block_len + 64 * st, s, 8 * st);
    for (int i = 0; i < 8; ++i) acc[i] = ScrambleOne(acc[i], s.U64(128 + 8 * i));
  }
  const int stripes = static_cast<int>(((len - 1) - block_len * blocks) / 64);
  for (int st = 0; st < stripes; ++st) Accumulate512(acc, in + blocks * block_len + 64 * st, s, 8 * st);
  Accumulate512(acc, in + len - 64, s, 192 - 64 - 7);
  return MergeAccs(acc, s, len);
}

// ------------------------------------------------------------ parallel form
// XXH3's long-input loop adds per-stripe terms into 8 accumulators and
// scrambles them after every full 1 KiB block: acc_{b+1} = scramble(acc_b +
// S_b), where S_b depends only on block b's bytes. So the S_b of all blocks
// can be computed in parallel (and fused into the kernel that writes the
// bytes), and only the cheap chain of scrambles is sequential.

// The secret's u64 words at the offsets the long-input loop uses.
struct Keys {
  uint64_t stripe[23];   // at 8 j: word i of stripe st is keyed by stripe[st + i]
  uint64_t scramble[8];  // at 128 + 8 i
  uint64_t last[8];      // at 121 + 8 i (the last stripe)
  uint64_t merge[8];     // at 11 + 8 i
};
inline constexpr uint8_t kSecret[192] = KVSERVE_XXH3_SECRET;
constexpr uint64_t SecretU64(int o) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | kSecret[o + i];
  return v;
}
constexpr Keys MakeKeys() {
  Keys k{};
  for (int j = 0; j < 23; ++j) k.stripe[j] = SecretU64(8 * j);
  for (int i = 0; i < 8; ++i) {
    k.scramble[i] = SecretU64(128 + 8 * i);
    k.last[i] = SecretU64(121 + 8 * i);
    k.merge[i] = SecretU64(11 + 8 * i);
  }
  return k;
}

KV_HD uint64_t InitAcc(int i) {
  return i == 0 ? kPrime32_3 : i == 1 ? kPrime64_1 : i == 2 ? kPrime64_2 : i == 3 ? kPrime64_3
       : i == 4 ? kPrime64_4 : i == 5 ? kPrime32_2 : i == 6 ? kPrime64_5 : kPrime32_1;
}

// The accumulator terms of four consecutive words of one stripe: the 32
// bytes `w` (8 little-endian u32) are words i0 .. i0+3 (i0 = 0 or 4) of
// stripe `stripe` of a block; c[k] receives the terms of acc[i0 + k].
KV_HD void QuarterStripeTerms(const Keys& keys, const uint32_t w[8], int stripe, int i0, uint64_t c[4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint64_t data = static_cast<uint64_t>(w[2 * k]) | (static_cast<uint64_t>(w[2 * k + 1]) << 32);
    const uint64_t key = data ^ keys.stripe[stripe + i0 + k];
    c[k ^ 1] += data;
    c[k] += (key & 0xFFFFFFFFull) * (key >> 32);
  }
}

// The merge and avalanche of the long-input hash from the final accumulators.
KV_HD uint64_t FinishLong(const uint64_t acc[8], const Keys& keys, uint64_t len) {
  uint64_t r = len * kPrime64_1;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    r += MulFold64(acc[2 * i] ^ keys.merge[2 * i], acc[2 * i + 1] ^ keys.merge[2 * i + 1]);
  return Avalanche3(r);
}


}  // namespace kvserve::cuda::xxh3

#endif  // KVSERVE_CUDA_XXH3_CUH_
