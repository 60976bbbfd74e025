// Copyright kvserve authors. `kvserve synth`: a synthetic KV file (and
// matching synthetic head scores) from a shape preset and overrides. Not
// part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_SYNTH_FILES_H_
#define KVSERVE_EXPERIMENTS_SYNTH_FILES_H_

#include <cstdint>
#include <string>

#include "experiments/lab.h"
#include "kvserve/kv_file.h"

namespace kvserve::lab {

struct SynthFileOptions {
  std::string output;
  std::string shape = "small";                             // a SynthShapePresets() name
  int layers = 0, kv_heads = 0, tokens = 0, head_dim = 0;  // > 0 overrides the preset's
  std::string dtype = "bf16";
  uint64_t seed = 1;
  std::string head_scores;  // also write synthetic head scores here
  SynthOptions model;       // magnitudes and correlations (shape/dtype/seed are replaced)
};

// Generates the cache `o` describes and writes it to o.output with
// SynthMetadata (plus the preset name), and the head scores when asked;
// progress lines say what and how large. InvalidArgument for an unknown
// preset or dtype; the writers' errors.
Status WriteSynthFiles(const SynthFileOptions& o, const Progress& progress);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_SYNTH_FILES_H_
