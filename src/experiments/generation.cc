// Copyright kvserve authors. experiments/generation.h.
#include "experiments/generation.h"

#include "experiments/runtime_tools.h"

namespace kvserve::lab {

Result<GenerationResult> RunGeneration(const GenerationOptions& a, const Progress& progress) {
  const double start = NowSeconds();
  KVSERVE_ASSIGN_OR_RETURN(auto model, Model::Load(a.model, RuntimeOptions{a.threads}));
  const ModelConfig& c = model->config();
  const std::string eos = JoinIds(c.eos_token_ids);
  Note(progress, "loaded {} ({} layers, {} M non-embedding params, eos ids {}) in {:.2f} s",
       a.model, c.layers, c.NonEmbeddingParameters() / 1e6, eos.empty() ? "none" : eos,
       NowSeconds() - start);
  KvState kv;
  if (!a.import_kv.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(kv, ImportKV(a.import_kv));
    if (kv.last_logits().size() != static_cast<size_t>(c.vocab_size))
      return Status::InvalidArgument(a.import_kv + ": KV state has no logits for this model");
    Note(progress, "imported KV state of {} tokens from {}", kv.tokens(), a.import_kv);
  } else {
    KVSERVE_ASSIGN_OR_RETURN(auto tokens, ResolvePrompt(a.prompt, a.model, c));
    const double t0 = NowSeconds();
    KVSERVE_ASSIGN_OR_RETURN(auto prefill, model->Prefill(tokens));
    const double dt = NowSeconds() - t0;
    Note(progress, "prefill {} tokens in {:.3f} s ({:.0f} tokens/s)", tokens.size(), dt,
         tokens.size() / dt);
    kv = std::move(prefill.kv);
  }
  if (!a.export_kv.empty()) {
    KVSERVE_RETURN_IF_ERROR(ExportKV(kv, a.export_kv));
    Note(progress, "exported KV state ({}) to {}", HumanBytes(KvStateSize(kv)), a.export_kv);
  }
  Sampler sampler(a.sampling);
  const double t0 = NowSeconds();
  GenerationResult r;
  KVSERVE_ASSIGN_OR_RETURN(
      r.tokens, Generate(*model, &kv, kv.last_logits(), a.max_new_tokens, &sampler, !a.ignore_eos));
  const double dt = NowSeconds() - t0;
  if (!r.tokens.empty())
    Note(progress, "decoded {} tokens in {:.3f} s ({:.1f} tokens/s)", r.tokens.size(), dt,
         r.tokens.size() / dt);
  // The text, when the model has a tokenizer (a model without one, e.g. a
  // random-weight test model, gives ids only).
  auto tok = Tokenizer::Load(a.prompt.tokenizer.empty() ? a.model : a.prompt.tokenizer);
  if (!tok.ok()) {
    if (tok.status().code() != StatusCode::kNotFound) r.text_error = tok.status();
    return r;
  }
  auto text = (*tok)->Decode(r.tokens);
  if (text.ok()) r.text = std::move(*text);
  r.text_error = text.status();
  return r;
}

}  // namespace kvserve::lab
