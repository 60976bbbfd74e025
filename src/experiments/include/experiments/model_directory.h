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

// The model directory the serve commands use: `flag` when non-empty; else
// DefaultModelDirectory(models_dir); else the fallback model, written once
// to `fallback_dir` (e.g. under the build or temp directory). `*note` (may
// be null) says which was chosen. IOError when the fallback cannot be
// written.
Result<std::string> ResolveModelDirectory(const std::string& flag, const std::string& models_dir,
                                          const std::string& fallback_dir, std::string* note);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_MODEL_DIRECTORY_H_
