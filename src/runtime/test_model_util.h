// Copyright kvserve authors. Test helpers for runtime tests: random-weight
// model directories (no Python needed) and temporary directories.
#ifndef KVSERVE_RUNTIME_TEST_MODEL_UTIL_H_
#define KVSERVE_RUNTIME_TEST_MODEL_UTIL_H_

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/temp_dir.h"
#include "kvserve/runtime.h"

namespace kvserve::testing {

using TinyModelSpec = RandomModelSpec;

inline nlohmann::json TinyConfigJson(const TinyModelSpec& s) {
  return nlohmann::json::parse(RandomModelConfigJson(s));
}

inline bool WriteTinyModel(const std::string& dir, const TinyModelSpec& s) {
  return WriteRandomModel(dir, s).ok();
}

// Writes an exact-match workload of `n` samples (JSONL, ids "s-<i>") to
// `path` whose answers are `model`'s own greedy `answer_tokens`-token
// continuation of each prompt, so the "none" profile scores 1 on every
// sample. Prompts: 48..95 ids in [1, 90], seeded. False on a runtime error.
inline bool WriteGreedyWorkload(const Model& model, const std::string& path, int n, uint64_t seed,
                                int answer_tokens = 5, const std::string& workload = "tiny") {
  std::mt19937_64 rng(seed);
  std::string text;
  for (int i = 0; i < n; ++i) {
    const int len = 48 + static_cast<int>(rng() % 48);
    std::vector<int32_t> prompt(len);
    for (auto& t : prompt) t = 1 + static_cast<int32_t>(rng() % 90);
    std::vector<int32_t> full{0};
    full.insert(full.end(), prompt.begin(), prompt.end());
    auto pre = model.Prefill(full);
    if (!pre.ok()) return false;
    Sampler greedy(SamplingOptions{});
    auto answer = Generate(model, &pre->kv, pre->kv.last_logits(), answer_tokens, &greedy, false);
    if (!answer.ok()) return false;
    text += nlohmann::json({{"id", "s-" + std::to_string(i)}, {"workload", workload},
                            {"metric", "exact_match"}, {"prompt_ids", prompt},
                            {"answer_ids", *answer}})
                .dump() +
            "\n";
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace kvserve::testing

#endif  // KVSERVE_RUNTIME_TEST_MODEL_UTIL_H_
