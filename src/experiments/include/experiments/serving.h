// Copyright kvserve authors. What the serving commands (serve, router, pool,
// transport) share beyond their flags: the shared secret, stop signals, the
// open-file limit, address files, the prefill worker's profile table and
// latency model, and text prompts through a model's tokenizer. Not part of
// the installed library.
#ifndef KVSERVE_EXPERIMENTS_SERVING_H_
#define KVSERVE_EXPERIMENTS_SERVING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experiments/lab.h"
#include "kvserve/controller.h"
#include "kvserve/runtime.h"
#include "kvserve/status.h"

namespace kvserve::lab {

// The secret from `secret_file` (trailing newlines dropped) or, without one,
// $KVSERVE_SECRET; "" (with a warning through `progress`) when neither is
// set. NotFound/IOError/InvalidArgument for an unreadable or empty file.
Result<std::string> LoadSecret(const std::string& secret_file, const Progress& progress);

// Raises this process's open-file limit (RLIMIT_NOFILE) to its hard limit,
// so a server can hold AdmissionOptions::max_unauthenticated handshakes
// (docs/transport.md §3); warns through `progress` when the limit stays
// below `wanted`. Returns the limit in force (0 when it cannot be read).
uint64_t RaiseOpenFileLimit(uint64_t wanted, const Progress& progress);

// Blocks SIGINT/SIGTERM for every thread started after this call; then
// WaitForStopSignal returns once one arrives, or after `seconds` when > 0.
void BlockStopSignals();
void WaitForStopSignal(double seconds);

// Writes "`address`\n" to `path` through a temporary renamed into place, so
// a process polling for the file never reads half an address. IOError.
Status WriteAddressFile(const std::string& path, const std::string& address);

// The profile table a prefill worker serving `model_dir` loads: `flag` when
// non-empty; else the model's measured table under `profiles_dir`
// (DefaultProfileTablePath). NotFound naming the file looked for, and how to
// pass one, when there is none.
Result<std::string> PrefillTablePath(const std::string& flag, const std::string& model_dir,
                                     const std::string& profiles_dir);

// "streamed" -> the layer-pipelined model, "serial" -> Eq. 1, as the
// prefill worker's controller uses them; InvalidArgument otherwise.
Result<LatencyModel> ParseWorkerLatencyModel(const std::string& name);

// The model directory's config.json, parsed. NotFound / Corruption.
Result<ModelConfig> LoadModelConfig(const std::string& model_dir);

// A text prompt as a serving front end tokenizes it: the ids of `text`
// through the tokenizer of `model_dir` (its chat template, else the
// config's bos) and that tokenizer, to decode the replies with.
// InvalidArgument when the prompt has no tokens or a token lies outside the
// model's vocabulary.
struct TextPrompt {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> ids;
};
Result<TextPrompt> LoadTextPrompt(const std::string& model_dir, const std::string& text);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_SERVING_H_
