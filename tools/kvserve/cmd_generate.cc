// Copyright kvserve authors. `kvserve generate`: run a model on a prompt, with
// the prefill/decode split exposed: --export-kv writes the KV state after
// prefill (a prefill worker), --import-kv continues from one (a decode
// worker).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/runtime_tools.h"
#include "experiments/model_directory.h"
#include "kvserve/runtime.h"
#include "prompt_input.h"

namespace kvserve::cli {
namespace {

struct GenerateArgs {
  std::string model;
  PromptInput prompt;
  int max_new_tokens = 32;
  SamplingOptions sampling;
  std::string export_kv, import_kv;
  int threads = 0;
  bool ignore_eos = false;
};

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
  const double start = NowSeconds();
  auto model = Model::Load(a.model, RuntimeOptions{a.threads});
  if (!model.ok()) return ReportError("generate", model.status());
  const std::string eos = lab::JoinIds((*model)->config().eos_token_ids);
  Progress("generate", "loaded {} ({} layers, {} M non-embedding params, eos ids {}) in {:.2f} s",
           a.model, (*model)->config().layers, (*model)->config().NonEmbeddingParameters() / 1e6,
           eos.empty() ? "none" : eos, NowSeconds() - start);
  KvState kv;
  if (!a.import_kv.empty()) {
    auto imported = ImportKV(a.import_kv);
    if (!imported.ok()) return ReportError("generate", imported.status());
    kv = std::move(imported).value();
    if (kv.last_logits().size() != static_cast<size_t>((*model)->config().vocab_size)) {
      return ReportError("generate", Status::InvalidArgument(
                                         a.import_kv + ": KV state has no logits for this model"));
    }
    Progress("generate", "imported KV state of {} tokens from {}", kv.tokens(), a.import_kv);
  } else {
    auto tokens = a.prompt.Resolve(a.model, **model);
    if (!tokens.ok()) return ReportError("generate", tokens.status());
    const double t0 = NowSeconds();
    auto prefill = (*model)->Prefill(*tokens);
    if (!prefill.ok()) return ReportError("generate", prefill.status());
    const double dt = NowSeconds() - t0;
    Progress("generate", "prefill {} tokens in {:.3f} s ({:.0f} tokens/s)", tokens->size(), dt,
             tokens->size() / dt);
    kv = std::move(prefill->kv);
  }
  if (!a.export_kv.empty()) {
    if (Status s = ExportKV(kv, a.export_kv); !s.ok()) return ReportError("generate", s);
    Progress("generate", "exported KV state ({}) to {}", HumanBytes(KvStateSize(kv)), a.export_kv);
  }
  Sampler sampler(a.sampling);
  const double t0 = NowSeconds();
  auto generated = Generate(**model, &kv, kv.last_logits(), a.max_new_tokens, &sampler,
                            !a.ignore_eos);
  if (!generated.ok()) return ReportError("generate", generated.status());
  const double dt = NowSeconds() - t0;
  if (!generated->empty()) {
    Progress("generate", "decoded {} tokens in {:.3f} s ({:.1f} tokens/s)", generated->size(), dt,
             generated->size() / dt);
  }
  fmt::print("tokens: {}\n", lab::JoinIds(*generated));
  // The text, when the model has a tokenizer (a model without one, e.g. a
  // random-weight test model, prints ids only).
  auto tok = Tokenizer::Load(a.prompt.tokenizer.empty() ? a.model : a.prompt.tokenizer);
  if (!tok.ok()) {
    if (tok.status().code() != StatusCode::kNotFound) return ReportError("generate", tok.status());
    return 0;
  }
  auto text = (*tok)->Decode(*generated);
  if (!text.ok()) return ReportError("generate", text.status());
  fmt::print("text: {}\n", *text);
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
  a->prompt.AddOptions(sub);
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
