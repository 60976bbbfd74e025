// Copyright kvserve authors. What the runtime commands (kv-dump,
// head-scores, generate) do with a model beyond loading it: a prefilled KV
// cache as a KV file, calibration windows of a token stream, ids as text.
// Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_RUNTIME_TOOLS_H_
#define KVSERVE_EXPERIMENTS_RUNTIME_TOOLS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvserve/kv.h"
#include "kvserve/kv_file.h"
#include "kvserve/runtime.h"

namespace kvserve::lab {

// `kv` (any dtype) converted element by element to `dtype` (rounded as
// StoreFromFloat rounds), same shape.
KvCache ConvertKv(const KvView& kv, DType dtype);

// The metadata `kvserve kv-dump` writes beside a real model's KV: source,
// model (`model_dir`), family, rope_theta, synthetic=false and the prompt's
// token ids.
KvFileMetadata KvDumpMetadata(const std::string& model_dir, const ModelConfig& config,
                              std::span<const int32_t> tokens);

// Up to `count` consecutive windows of `window` (>= 1) tokens of `tokens`
// (the last may be shorter): calibration prompts from one token stream.
std::vector<std::vector<int32_t>> TokenWindows(std::span<const int32_t> tokens, int count,
                                               int window);

// "1,2,3".
std::string JoinIds(std::span<const int32_t> ids);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_RUNTIME_TOOLS_H_
