// Copyright kvserve authors. Internals of the synthetic KV generator
// (public API: include/kvserve/kv_file.h). Exposed for tests.
#ifndef KVSERVE_IO_SYNTH_KV_H_
#define KVSERVE_IO_SYNTH_KV_H_

#include <cstdint>

#include "kvserve/kv_file.h"

namespace kvserve::io {

// xoshiro256** seeded through splitmix64: a small, portable generator whose
// output depends only on the seed (std:: distributions are not portable
// across standard libraries, so none are used).
class SynthRng {
 public:
  explicit SynthRng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, 1).
  double Uniform();
  // Standard normal (Box-Muller; both values of a pair are used).
  double Normal();

 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0;
};

// Seed of the independent stream of slab (layer, kind, head): a hash of the
// generator seed and the slab's coordinates, so slabs can be generated in
// any order or in parallel with identical results.
uint64_t SlabSeed(uint64_t seed, int layer, int kind, int head);

}  // namespace kvserve::io

#endif  // KVSERVE_IO_SYNTH_KV_H_
