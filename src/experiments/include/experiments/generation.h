// Copyright kvserve authors. `kvserve generate`: a model run on a prompt with
// the prefill/decode split exposed (export the KV state after prefill, or
// continue from an imported one). Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_GENERATION_H_
#define KVSERVE_EXPERIMENTS_GENERATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "experiments/lab.h"
#include "experiments/prompt_source.h"
#include "kvserve/runtime.h"

namespace kvserve::lab {

struct GenerationOptions {
  std::string model;  // model directory
  PromptSource prompt;
  int max_new_tokens = 32;
  SamplingOptions sampling;
  std::string export_kv;  // write the KV state after prefill here
  std::string import_kv;  // decode from this KV state instead of a prompt
  int threads = 0;
  bool ignore_eos = false;
};

struct GenerationResult {
  std::vector<int32_t> tokens;      // generated ids
  std::optional<std::string> text;  // their text, when the model has a tokenizer
  Status text_error;                // why a tokenizer that is there could not give the text
};

// Loads the model, prefills the prompt (or imports o.import_kv: its logits
// must be for this model's vocabulary, else InvalidArgument), exports the
// state when asked, and generates up to o.max_new_tokens (stopping at the
// model's eos ids unless o.ignore_eos), with timings through `progress`.
// The text is decoded with the prompt's tokenizer (else the model's); a
// model without one gives no text, and a tokenizer that fails leaves the
// tokens with its error in text_error. The runtime's errors.
Result<GenerationResult> RunGeneration(const GenerationOptions& o, const Progress& progress);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_GENERATION_H_
