// Copyright kvserve authors. `kvserve head-scores`: DuoAttention-style
// per-(layer, kv_head) retrieval scores for mixhq and duo.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "experiments/runtime_tools.h"
#include "kvserve/runtime.h"
#include "prompt_input.h"

namespace kvserve::cli {
namespace {

struct HeadScoresArgs {
  std::string model, output;
  PromptInput prompt;
  int prompt_tokens = 1024;
  int prompts = 4;
  HeadCalibrationOptions calibration;
  int threads = 0;
};

int RunHeadScores(const HeadScoresArgs& a) {
  auto model = Model::Load(a.model, RuntimeOptions{a.threads});
  if (!model.ok()) return ReportError("head-scores", model.status());
  auto tokens = a.prompt.Resolve(a.model, **model);
  if (!tokens.ok()) return ReportError("head-scores", tokens.status());
  // Calibration prompts: consecutive windows of the token stream.
  const auto prompts = lab::TokenWindows(*tokens, a.prompts, a.prompt_tokens);
  Progress("head-scores", "{} calibration prompts from {} tokens; sink {}, recent {}",
           prompts.size(), tokens->size(), a.calibration.sink_tokens,
           a.calibration.recent_tokens);
  const double t0 = NowSeconds();
  auto scores = CalibrateHeadScores(**model, prompts, a.calibration);
  if (!scores.ok()) return ReportError("head-scores", scores.status());
  if (Status s = scores->Save(a.output); !s.ok()) return ReportError("head-scores", s);
  Progress("head-scores", "wrote {} ({} x {}) in {:.2f} s", a.output, scores->layers,
           scores->kv_heads, NowSeconds() - t0);
  for (int l = 0; l < scores->layers; ++l) {
    std::string row;
    for (int h = 0; h < scores->kv_heads; ++h) row += fmt::format(" {:.4f}", scores->at(l, h));
    fmt::print("layer {:>3}:{}\n", l, row);
  }
  return 0;
}

RunFn SetupHeadScores(CLI::App& sub) {
  auto a = std::make_shared<HeadScoresArgs>();
  sub.description(
      "Calibrate per-(layer, kv_head) retrieval scores: the mean relative change of each head's "
      "attention output when its attention is restricted to sink + recent tokens (DuoAttention), "
      "over calibration prompts cut from the given text/ids. Writes the head-score JSON that the "
      "mixhq and duo quantisers read (--head-scores).");
  sub.add_option("-m,--model", a->model, "model directory")->required();
  sub.add_option("-o,--output", a->output, "head-score JSON to write")->required();
  a->prompt.AddOptions(sub);
  sub.add_option("--prompt-tokens", a->prompt_tokens, "tokens per calibration prompt")
      ->capture_default_str();
  sub.add_option("--prompts", a->prompts, "maximum number of calibration prompts")
      ->capture_default_str();
  sub.add_option("--sink", a->calibration.sink_tokens, "sink tokens kept")->capture_default_str();
  sub.add_option("--recent", a->calibration.recent_tokens, "recent tokens kept")
      ->capture_default_str();
  sub.add_option("--threads", a->threads, "worker threads (0 = all cores)")->capture_default_str();
  return [a] { return RunHeadScores(*a); };
}

}  // namespace

KVSERVE_COMMAND(head_scores, "Calibrate per-head retrieval scores (DuoAttention-style)",
                SetupHeadScores);

}  // namespace kvserve::cli
