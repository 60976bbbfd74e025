// Copyright kvserve authors. `kvserve generate`: run a model on a prompt, with
// the prefill/decode split exposed: --export-kv writes the KV state after
// prefill (a prefill worker), --import-kv continues from one (a decode
// worker).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/generation.h"
#include "experiments/runtime_tools.h"
#include "experiments/model_directory.h"
#include "kvserve/runtime.h"
#include "prompt_input.h"

namespace kvserve::cli {
namespace {

using GenerateArgs = lab::GenerationOptions;

int RunGenerate(GenerateArgs a) {
  if (a.model.empty()) {
    // The shipped model of the data directory.
    auto data = DataDirectory();
    if (!data.ok()) return ReportError("generate", data.status().WithContext("no --model"));
    a.model = lab::DefaultModelDirectory(lab::DataPath(*data, "models"));
    if (a.model.empty())
      return ReportError("generate", Status::NotFound("no --model, and no model under " +
                                                      lab::DataPath(*data, "models")));
  }
  auto r = lab::RunGeneration(a, ProgressTo("generate"));
  if (!r.ok()) return ReportError("generate", r.status());
  fmt::print("tokens: {}\n", lab::JoinIds(r->tokens));
  if (!r->text_error.ok()) return ReportError("generate", r->text_error);
  if (r->text) fmt::print("text: {}\n", *r->text);
  return 0;
}

RunFn SetupGenerate(CLI::App& sub) {
  auto a = std::make_shared<GenerateArgs>();
  sub.description(
      "Run a Llama/Qwen2 model (HF directory: config.json, *.safetensors, optional "
      "generation_config.json and tokenizer.json or tokenizer.model) on a prompt and print the "
      "generated token ids, and their text when the model has a tokenizer. Generation stops at "
      "generation_config.json's eos ids (else config.json's). "
      "--export-kv writes the KV state after prefill; --import-kv decodes from a state written "
      "by another process, so a prefill worker and a decode worker can be separate processes.");
  sub.add_option("-m,--model", a->model,
                 "model directory (default: the first model under <data>/models/)");
  AddPromptOptions(sub, &a->prompt);
  sub.add_option("-n,--max-new-tokens", a->max_new_tokens, "tokens to generate")->capture_default_str();
  sub.add_option("--temperature", a->sampling.temperature, "0 = greedy")->capture_default_str();
  sub.add_option("--top-p", a->sampling.top_p, "nucleus mass")->capture_default_str();
  sub.add_option("--seed", a->sampling.seed, "sampling seed")->capture_default_str();
  sub.add_option("--export-kv", a->export_kv, "write the KV state after prefill to this file");
  sub.add_option("--import-kv", a->import_kv, "decode from this KV state instead of a prompt");
  sub.add_option("--threads", a->threads, "worker threads (0 = all cores)")->capture_default_str();
  sub.add_flag("--ignore-eos", a->ignore_eos, "do not stop at an end-of-sequence token");
  return [a] { return RunGenerate(*a); };
}

}  // namespace

KVSERVE_COMMAND(generate, "Generate tokens with the built-in Llama/Qwen2 runtime", SetupGenerate);

}  // namespace kvserve::cli
