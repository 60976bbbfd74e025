// Copyright kvserve authors. Helpers shared by `kvserve serve`, `router` and
// `e2e`: the shared secret, the model directory, address lists.
#ifndef KVSERVE_TOOLS_KVSERVE_SERVE_CLI_H_
#define KVSERVE_TOOLS_KVSERVE_SERVE_CLI_H_

#include <string>
#include <vector>

#include "experiments/lab.h"
#include "kvserve/status.h"

namespace kvserve::cli {

// The secret from `secret_file` (trailing newlines dropped) or, without one,
// $KVSERVE_SECRET; "" (with a warning on stderr) when neither is set.
// NotFound/IOError/InvalidArgument for an unreadable or empty file.
Result<std::string> LoadServeSecret(std::string_view command, const std::string& secret_file);

// --model DIR, else the first model under models/ (NotFound when there is
// none), or with --model random the random-weight model written under
// $TMPDIR. Prints which one on stderr.
Result<std::string> ServeModelDirectory(std::string_view command, const std::string& flag);

using lab::Mean;
using lab::Percentile;
using lab::SplitList;

// Raises this process's open-file limit (RLIMIT_NOFILE) to its hard limit,
// so a server can hold AdmissionOptions::max_unauthenticated handshakes
// (docs/transport.md §3); says on stderr when the limit stays below
// `wanted`. Returns the limit in force.
uint64_t RaiseOpenFileLimit(std::string_view command, uint64_t wanted);

// Blocks SIGINT/SIGTERM for every thread started after this call; then
// WaitForStopSignal returns once one arrives or after `seconds` (> 0).
void BlockStopSignals();
void WaitForStopSignal(double seconds);

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_SERVE_CLI_H_
