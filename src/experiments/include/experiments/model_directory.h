// Copyright kvserve authors. Which model the serve, generate and e2e commands
// load by default (lab code: the library takes a model directory).
#ifndef KVSERVE_EXPERIMENTS_MODEL_DIRECTORY_H_
#define KVSERVE_EXPERIMENTS_MODEL_DIRECTORY_H_

#include <string>

#include "kvserve/runtime.h"
#include "kvserve/status.h"

namespace kvserve::lab {

// The default model directory: the first directory under `models_dir`
// (sorted by name) that holds a config.json, or "" when there is none.
std::string DefaultModelDirectory(const std::string& models_dir);

// The random-weight Qwen2-family model used when no model is shipped: 8
// layers, 4 KV heads of 64 dims (16 KiB of f32 KV per token), hidden 256,
// vocabulary 1024: small enough to prefill quickly on two cores, with a KV
// cache large enough that moving it matters.
RandomModelSpec FallbackModelSpec();

// The model directory the serve commands use: `flag` when it names a
// directory; the random-weight FallbackModelSpec model, written once to
// `fallback_dir`, when `flag` is "random"; else, with no flag,
// DefaultModelDirectory(models_dir). NotFound (saying how to pass a model
// or ask for the random one) when there is no flag and no model under
// `models_dir`: a made-up model never stands in silently. `*note` (may be
// null) says which was chosen. IOError when the random model cannot be
// written.
Result<std::string> ResolveModelDirectory(const std::string& flag, const std::string& models_dir,
                                          const std::string& fallback_dir, std::string* note);

// The measured profile table of the model in `model_dir`:
// `<profiles_dir>/<model directory name>-unified.json` (what `kvserve
// profile --workload unified` writes for the shipped model), or "" when
// there is none.
std::string DefaultProfileTablePath(const std::string& model_dir,
                                    const std::string& profiles_dir = "configs/profiles");

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_MODEL_DIRECTORY_H_
