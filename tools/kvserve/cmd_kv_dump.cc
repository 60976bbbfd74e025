// Copyright kvserve authors. `kvserve kv-dump`: prefill a prompt and write the
// model's real KV cache as a KV file (safetensors, docs/kv-files.md).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/runtime_tools.h"
#include "kvserve/kv_file.h"
#include "kvserve/runtime.h"
#include "prompt_input.h"

namespace kvserve::cli {
namespace {

struct KvDumpArgs {
  std::string model, output, dtype = "bf16";
  PromptInput prompt;
  int threads = 0;
};

int RunKvDump(const KvDumpArgs& a) {
  auto dtype = ParseDType(a.dtype);
  if (!dtype.ok()) return ReportError("kv-dump", dtype.status());
  auto model = Model::Load(a.model, RuntimeOptions{a.threads});
  if (!model.ok()) return ReportError("kv-dump", model.status());
  auto tokens = a.prompt.Resolve(a.model, **model);
  if (!tokens.ok()) return ReportError("kv-dump", tokens.status());
  const double t0 = NowSeconds();
  auto prefill = (*model)->Prefill(*tokens);
  if (!prefill.ok()) return ReportError("kv-dump", prefill.status());
  Progress("kv-dump", "prefill {} tokens in {:.3f} s", tokens->size(), NowSeconds() - t0);
  const KvView f32 = prefill->kv.view();
  const KvCache out = lab::ConvertKv(f32, *dtype);
  const KvFileMetadata meta = lab::KvDumpMetadata(a.model, (*model)->config(), *tokens);
  if (Status s = SaveKvFile(a.output, out.view(), meta); !s.ok()) return ReportError("kv-dump", s);
  Progress("kv-dump", "wrote {} ({} {}, {})", a.output, ShapeString(f32.shape), DTypeName(*dtype),
           HumanBytes(out.size_bytes()));
  return 0;
}

RunFn SetupKvDump(CLI::App& sub) {
  auto a = std::make_shared<KvDumpArgs>();
  sub.description(
      "Prefill a prompt with a Llama/Qwen2 model and write its KV cache (post-RoPE K, V; "
      "[layer][K/V][kv_head][token][dim]) as a KV file, for compress/eval on real caches.");
  sub.add_option("-m,--model", a->model, "model directory")->required();
  sub.add_option("-o,--output", a->output, "KV file to write (.safetensors)")->required();
  a->prompt.AddOptions(sub);
  sub.add_option("--dtype", a->dtype, "stored element type: f32, f16, bf16")->capture_default_str();
  sub.add_option("--threads", a->threads, "worker threads (0 = all cores)")->capture_default_str();
  return [a] { return RunKvDump(*a); };
}

}  // namespace

KVSERVE_COMMAND(kv_dump, "Prefill a prompt and write the model's KV cache as a KV file",
                SetupKvDump);

}  // namespace kvserve::cli
