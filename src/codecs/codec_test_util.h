// Copyright kvserve authors. Seeded random segments for the codec tests and
// benchmarks. Test-only header.
#ifndef KVSERVE_CODECS_CODEC_TEST_UTIL_H_
#define KVSERVE_CODECS_CODEC_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/stages.h"

namespace kvserve::codecs::testing {

enum class Distribution {
  kUniform,    // every level equally likely
  kGeometric,  // P(s) ~ r^s over a random permutation of a random sub-alphabet
  kGaussian,   // rounded normal around the middle level: quantised activations
  kSingle,     // one random symbol repeated
  kSparse,     // a few random distinct symbols out of many levels
};
inline constexpr Distribution kAllDistributions[] = {
    Distribution::kUniform, Distribution::kGeometric, Distribution::kGaussian,
    Distribution::kSingle, Distribution::kSparse};

// `count` symbols < levels drawn from `dist` with parameters drawn from `rng`.
inline pipeline::CodeSegment RandomSegment(std::mt19937_64& rng, int levels, size_t count,
                                           Distribution dist) {
  pipeline::CodeSegment seg;
  seg.levels = static_cast<uint16_t>(levels);
  seg.symbols.resize(count);
  std::uniform_int_distribution<int> any(0, levels - 1);
  switch (dist) {
    case Distribution::kUniform:
      for (auto& s : seg.symbols) s = static_cast<uint8_t>(any(rng));
      break;
    case Distribution::kGeometric: {
      std::vector<uint8_t> perm(levels);
      for (int i = 0; i < levels; ++i) perm[i] = static_cast<uint8_t>(i);
      std::shuffle(perm.begin(), perm.end(), rng);
      const double p = std::uniform_real_distribution<double>(0.05, 0.95)(rng);
      std::geometric_distribution<int> geo(p);
      for (auto& s : seg.symbols) s = perm[std::min(geo(rng), levels - 1)];
      break;
    }
    case Distribution::kGaussian: {
      const double sigma = std::uniform_real_distribution<double>(0.3, levels / 4.0)(rng);
      std::normal_distribution<double> normal((levels - 1) / 2.0, sigma);
      for (auto& s : seg.symbols) {
        s = static_cast<uint8_t>(std::clamp<long>(std::lround(normal(rng)), 0, levels - 1));
      }
      break;
    }
    case Distribution::kSingle: {
      const auto v = static_cast<uint8_t>(any(rng));
      for (auto& s : seg.symbols) s = v;
      break;
    }
    case Distribution::kSparse: {
      std::vector<uint8_t> used(std::uniform_int_distribution<int>(1, 4)(rng));
      for (auto& u : used) u = static_cast<uint8_t>(any(rng));
      std::uniform_int_distribution<size_t> pick(0, used.size() - 1);
      for (auto& s : seg.symbols) s = used[pick(rng)];
      break;
    }
  }
  return seg;
}

// A random level count in [2, 256], biased towards the small alphabets that
// 1-4 bit quantisers produce, and sometimes not a power of two.
inline int RandomLevels(std::mt19937_64& rng) {
  switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
    case 0: return 1 << std::uniform_int_distribution<int>(1, 8)(rng);
    case 1: return std::uniform_int_distribution<int>(2, 16)(rng);
    default: return std::uniform_int_distribution<int>(2, 256)(rng);
  }
}

// A random count in [0, max_count], often tiny (0, 1, ragged tails).
inline size_t RandomCount(std::mt19937_64& rng, size_t max_count) {
  switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
    case 0: return std::uniform_int_distribution<size_t>(0, std::min<size_t>(3, max_count))(rng);
    case 1: return std::uniform_int_distribution<size_t>(0, std::min<size_t>(200, max_count))(rng);
    default: return std::uniform_int_distribution<size_t>(0, max_count)(rng);
  }
}

// Empirical entropy of the symbols, in bits (sum over symbols).
inline double EntropyBits(const std::vector<uint8_t>& symbols) {
  std::vector<uint64_t> counts(256);
  for (uint8_t s : symbols) ++counts[s];
  double bits = 0;
  const double n = static_cast<double>(symbols.size());
  for (uint64_t c : counts) {
    if (c) bits += static_cast<double>(c) * std::log2(n / static_cast<double>(c));
  }
  return bits;
}

}  // namespace kvserve::codecs::testing

#endif  // KVSERVE_CODECS_CODEC_TEST_UTIL_H_
