// Copyright kvserve authors. Helpers shared by `kvserve serve`, `router`,
// `pool` and `transport` (the work is experiments/serving.h's).
#ifndef KVSERVE_TOOLS_KVSERVE_SERVE_CLI_H_
#define KVSERVE_TOOLS_KVSERVE_SERVE_CLI_H_

#include <string>
#include <string_view>

#include "cli_util.h"
#include "experiments/serving.h"
#include "kvserve/router.h"
#include "kvserve/serve.h"
#include "transport_cli.h"

namespace kvserve::cli {

// lab::LoadSecret with its warning as a progress line of `command`.
inline Result<std::string> LoadServeSecret(std::string_view command, const std::string& file) {
  return lab::LoadSecret(file, ProgressTo(command));
}

// --model DIR, else the first model under <data>/models/ (NotFound when
// there is none), or with --model random the random-weight model written
// under $TMPDIR. Prints which one on stderr.
Result<std::string> ServeModelDirectory(std::string_view command, const std::string& flag);

// The vocabulary size of ServeModelDirectory(command, flag)'s model.
Result<int> ServeModelVocab(std::string_view command, const std::string& flag);

// The flags `kvserve router` and `replay` share: --prefill (required),
// --secret-file, --pool-chunk-tokens and the transport's.
struct RouterFlags {
  std::string prefill;
  std::string secret_file;
  int pool_chunk_tokens = PrefillWorkerOptions{}.pool_chunk_tokens;
  TransportFlags transport;
};
void AddRouterFlags(CLI::App* sub, RouterFlags* flags);

// A router's options from `flags`: the prefill workers (InvalidArgument
// when none), the secret of --secret-file (or $KVSERVE_SECRET, warning when
// none), `local_id`, the workers' pool chunk.
Result<RouterOptions> ServeRouterOptions(std::string_view command, const RouterFlags& flags,
                                         const std::string& local_id);

using lab::BlockStopSignals;
using lab::Mean;
using lab::Percentile;
using lab::SplitList;
using lab::WaitForStopSignal;

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_SERVE_CLI_H_
