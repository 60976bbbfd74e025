// Copyright kvserve authors. Helpers shared by `kvserve serve`, `router`,
// `pool` and `transport` (the work is experiments/serving.h's).
#ifndef KVSERVE_TOOLS_KVSERVE_SERVE_CLI_H_
#define KVSERVE_TOOLS_KVSERVE_SERVE_CLI_H_

#include <string>
#include <string_view>

#include "cli_util.h"
#include "experiments/serving.h"

namespace kvserve::cli {

// lab::LoadSecret with its warning as a progress line of `command`.
inline Result<std::string> LoadServeSecret(std::string_view command, const std::string& file) {
  return lab::LoadSecret(file, ProgressTo(command));
}

// --model DIR, else the first model under <data>/models/ (NotFound when
// there is none), or with --model random the random-weight model written
// under $TMPDIR. Prints which one on stderr.
Result<std::string> ServeModelDirectory(std::string_view command, const std::string& flag);

using lab::BlockStopSignals;
using lab::Mean;
using lab::Percentile;
using lab::SplitList;
using lab::WaitForStopSignal;

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_SERVE_CLI_H_
