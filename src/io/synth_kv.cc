// Copyright kvserve authors. Synthetic KV caches with the structure of real
// ones. The model (docs/kv-files.md §Synthetic caches), per (layer, head):
//
//   keys:   pre-RoPE channel c at token t is  mu_c + sigma_c * z_t[c], where
//           z is an AR(1) process along tokens (lag-1 correlation rho_k) of
//           unit variance; mu_c is a non-zero channel mean; a few channel
//           pairs, chosen among the low-frequency half, are outliers with a
//           large mean and a larger spread. Then channel pairs (i, i + d/2)
//           are rotated by angle t * base^(-2i/d) (RoPE, half-split layout).
//   values: sigma_c * z_t[c] + small mean, AR(1) with rho_v, a few channels
//           with a moderately larger sigma; token 0 (the attention sink)
//           carries values near zero, as in trained models.
//
// Magnitudes grow mildly with depth. Every slab (layer, kind, head) draws
// from its own seeded stream, so output is independent of thread count.
#include "io/synth_kv.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kvserve/kv_file.h"

namespace kvserve {
namespace io {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

SynthRng::SynthRng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = SplitMix64(x);
}

uint64_t SynthRng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double SynthRng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double SynthRng::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = Uniform();
  while (u1 <= 0.0) u1 = Uniform();
  const double u2 = Uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 6.283185307179586 * u2;
  spare_ = r * std::sin(a);
  has_spare_ = true;
  return r * std::cos(a);
}

uint64_t SlabSeed(uint64_t seed, int layer, int kind, int head) {
  uint64_t x = seed ^ 0x6b76736572766521ULL;  // "kvserve!"
  uint64_t h = SplitMix64(x);
  x = h ^ (static_cast<uint64_t>(layer) << 32 | static_cast<uint64_t>(kind) << 24 |
           static_cast<uint64_t>(head));
  return SplitMix64(x);
}

namespace {

// Per-channel statistics of one slab.
struct ChannelModel {
  std::vector<float> mean;
  std::vector<float> sigma;
};

// Picks `count` distinct indices from [begin, end) with `rng`.
std::vector<int> PickDistinct(SynthRng& rng, int begin, int end, int count) {
  std::vector<int> all(end - begin);
  std::iota(all.begin(), all.end(), begin);
  count = std::min<int>(count, static_cast<int>(all.size()));
  for (int i = 0; i < count; ++i) {  // partial Fisher-Yates
    const int j = i + static_cast<int>(rng.Next() % (all.size() - i));
    std::swap(all[i], all[j]);
  }
  all.resize(count);
  return all;
}

ChannelModel KeyChannels(SynthRng& rng, const SynthOptions& o, float layer_scale) {
  const int d = o.shape.head_dim;
  const int half = d / 2;
  ChannelModel m{std::vector<float>(d), std::vector<float>(d)};
  for (int c = 0; c < d; ++c) {
    const double sigma = layer_scale * std::exp(0.3 * rng.Normal());
    m.sigma[c] = static_cast<float>(sigma);
    m.mean[c] = static_cast<float>(0.6 * sigma * rng.Normal());
  }
  // Outliers live in whole RoPE pairs of the low-frequency half, where the
  // rotation is slow and a large mean survives along many tokens.
  const int pairs = std::max(0, static_cast<int>(std::lround(o.key_outlier_fraction * half)));
  const int lo = half / 2;
  for (int i : PickDistinct(rng, lo, half, std::max(pairs, o.key_outlier_fraction > 0 ? 1 : 0))) {
    for (int c : {i, i + half}) {
      const double sign = rng.Uniform() < 0.5 ? -1.0 : 1.0;
      m.mean[c] = static_cast<float>(sign * o.key_outlier_scale * layer_scale *
                                     (0.5 + rng.Uniform()));
      m.sigma[c] *= static_cast<float>(std::sqrt(std::max(1.0f, o.key_outlier_scale)));
    }
  }
  return m;
}

ChannelModel ValueChannels(SynthRng& rng, const SynthOptions& o, float layer_scale) {
  const int d = o.shape.head_dim;
  ChannelModel m{std::vector<float>(d), std::vector<float>(d)};
  for (int c = 0; c < d; ++c) {
    const double sigma = 0.5 * layer_scale * std::exp(0.25 * rng.Normal());
    m.sigma[c] = static_cast<float>(sigma);
    m.mean[c] = static_cast<float>(0.1 * sigma * rng.Normal());
  }
  const int count = static_cast<int>(std::lround(o.value_outlier_fraction * d));
  for (int c : PickDistinct(rng, 0, d, std::max(count, o.value_outlier_fraction > 0 ? 1 : 0))) {
    m.sigma[c] *= o.value_outlier_scale;
  }
  return m;
}

// Generates one slab [tokens][head_dim] of fp32 values into `out`.
void GenerateSlab(const SynthOptions& o, int layer, int kind, int head,
                  const std::vector<float>& rope_cos, const std::vector<float>& rope_sin,
                  float* out) {
  const int d = o.shape.head_dim;
  const int half = d / 2;
  const int tokens = o.shape.tokens;
  SynthRng rng(SlabSeed(o.seed, layer, kind, head));
  const float depth = o.shape.layers > 1 ? static_cast<float>(layer) / (o.shape.layers - 1) : 0;
  const float layer_scale = 0.75f + 0.5f * depth;
  const bool is_key = kind == 0;
  const ChannelModel m =
      is_key ? KeyChannels(rng, o, layer_scale) : ValueChannels(rng, o, layer_scale);
  const double rho = is_key ? o.token_correlation_key : o.token_correlation_value;
  const double innovation = std::sqrt(std::max(0.0, 1.0 - rho * rho));

  std::vector<double> z(d);
  for (int c = 0; c < d; ++c) z[c] = rng.Normal();
  std::vector<float> pre(d);
  for (int t = 0; t < tokens; ++t) {
    if (t > 0) {
      for (int c = 0; c < d; ++c) z[c] = rho * z[c] + innovation * rng.Normal();
    }
    for (int c = 0; c < d; ++c) pre[c] = m.mean[c] + m.sigma[c] * static_cast<float>(z[c]);
    float* row = out + static_cast<size_t>(t) * d;
    if (is_key) {
      const float* cs = rope_cos.data() + static_cast<size_t>(t) * half;
      const float* sn = rope_sin.data() + static_cast<size_t>(t) * half;
      for (int i = 0; i < half; ++i) {
        const float a = pre[i];
        const float b = pre[i + half];
        row[i] = a * cs[i] - b * sn[i];
        row[i + half] = a * sn[i] + b * cs[i];
      }
    } else {
      const float sink = t == 0 ? 0.05f : 1.0f;
      for (int c = 0; c < d; ++c) row[c] = sink * pre[c];
    }
  }
}

constexpr SynthShapePreset kShapePresets[] = {
    {"small", KvShape{4, 4, 512, 64}, "4 layers, 4 KV heads, head_dim 64: quick tests and demos"},
    {"qwen2-0.5b", KvShape{24, 2, 2048, 64}, "Qwen2-0.5B: 24 layers, 2 KV heads, head_dim 64"},
    {"llama3-8b", KvShape{32, 8, 4096, 128}, "Llama-3-8B: 32 layers, 8 KV heads, head_dim 128"},
    {"qwen2.5-7b", KvShape{28, 4, 4096, 128}, "Qwen2.5-7B: 28 layers, 4 KV heads, head_dim 128"},
    {"llama3-70b", KvShape{80, 8, 4096, 128}, "Llama-3-70B: 80 layers, 8 KV heads, head_dim 128"},
};

}  // namespace
}  // namespace io

std::span<const SynthShapePreset> SynthShapePresets() { return io::kShapePresets; }

Result<SynthShapePreset> FindSynthShapePreset(std::string_view name) {
  std::string names;
  for (const auto& p : io::kShapePresets) {
    if (p.name == name) return p;
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return Status::NotFound("unknown shape preset '" + std::string(name) + "' (known: " + names +
                          ")");
}

Result<KvCache> SynthesizeKv(const SynthOptions& o) {
  const KvShape& s = o.shape;
  if (s.layers <= 0 || s.kv_heads <= 0 || s.tokens <= 0 || s.head_dim <= 0)
    return Status::InvalidArgument("synth: shape must be positive in every axis");
  if (s.head_dim % 2 != 0)
    return Status::InvalidArgument("synth: head_dim must be even (RoPE pairs channels)");
  if (s.NumElements() > (int64_t{1} << 34))
    return Status::ResourceExhausted("synth: more than 2^34 elements requested");
  auto in_unit = [](float v) { return v >= 0.0f && v < 1.0f; };
  if (!in_unit(o.token_correlation_key) || !in_unit(o.token_correlation_value))
    return Status::OutOfRange("synth: token correlations must lie in [0, 1)");
  if (!(o.key_outlier_fraction >= 0 && o.key_outlier_fraction <= 1 &&
        o.value_outlier_fraction >= 0 && o.value_outlier_fraction <= 1))
    return Status::OutOfRange("synth: outlier fractions must lie in [0, 1]");
  if (!(o.rope_base > 1.0f)) return Status::OutOfRange("synth: rope_base must exceed 1");

  // RoPE tables shared by every slab: angle = t * base^(-2i/d).
  const int half = s.head_dim / 2;
  std::vector<float> rope_cos(static_cast<size_t>(s.tokens) * half);
  std::vector<float> rope_sin(rope_cos.size());
  for (int i = 0; i < half; ++i) {
    const double freq = std::pow(static_cast<double>(o.rope_base), -2.0 * i / s.head_dim);
    for (int t = 0; t < s.tokens; ++t) {
      const double angle = std::fmod(t * freq, 6.283185307179586);
      rope_cos[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
      rope_sin[static_cast<size_t>(t) * half + i] = static_cast<float>(std::sin(angle));
    }
  }

  KvCache cache(o.dtype, s);
  MutableKvView view = cache.mutable_view();
  const size_t slabs = static_cast<size_t>(s.layers) * 2 * s.kv_heads;
  const size_t slab_elems = static_cast<size_t>(s.tokens) * s.head_dim;
  ThreadPool::Shared().ParallelFor(slabs, [&](size_t index) {
    const int head = static_cast<int>(index % s.kv_heads);
    const int kind = static_cast<int>(index / s.kv_heads % 2);
    const int layer = static_cast<int>(index / s.kv_heads / 2);
    std::vector<float> slab(slab_elems);
    io::GenerateSlab(o, layer, kind, head, rope_cos, rope_sin, slab.data());
    std::byte* dst = view.At(layer, kind, head, 0, 0);
    const size_t esize = DTypeSize(o.dtype);
    for (size_t e = 0; e < slab_elems; ++e) StoreFromFloat(slab[e], dst + e * esize, o.dtype);
  });
  return cache;
}

HeadScores SynthesizeHeadScores(int layers, int kv_heads, uint64_t seed) {
  HeadScores scores;
  scores.layers = std::max(0, layers);
  scores.kv_heads = std::max(0, kv_heads);
  io::SynthRng rng(io::SlabSeed(seed, -1, 2, 0));
  scores.scores.resize(static_cast<size_t>(scores.layers) * scores.kv_heads);
  for (float& s : scores.scores) {
    const double u = rng.Uniform();
    s = static_cast<float>(u * u * u);  // skewed: few retrieval-like heads
  }
  return scores;
}

KvFileMetadata SynthMetadata(const SynthOptions& o) {
  auto f = [](float v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  };
  return KvFileMetadata{
      {"synthetic", "true"},
      {"generator", "kvserve synth"},
      {"synth.seed", std::to_string(o.seed)},
      {"synth.token_correlation_key", f(o.token_correlation_key)},
      {"synth.token_correlation_value", f(o.token_correlation_value)},
      {"synth.key_outlier_fraction", f(o.key_outlier_fraction)},
      {"synth.key_outlier_scale", f(o.key_outlier_scale)},
      {"synth.value_outlier_fraction", f(o.value_outlier_fraction)},
      {"synth.value_outlier_scale", f(o.value_outlier_scale)},
      {"synth.rope_base", f(o.rope_base)},
  };
}

}  // namespace kvserve
