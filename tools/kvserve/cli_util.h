// Copyright kvserve authors. Helpers shared by the CLI's sub-commands:
// error reporting, progress lines, file I/O, profile resolution, formatting.
#ifndef KVSERVE_TOOLS_KVSERVE_CLI_UTIL_H_
#define KVSERVE_TOOLS_KVSERVE_CLI_UTIL_H_

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "experiments/lab.h"
#include "experiments/profile_inputs.h"
#include "kvserve/status.h"

namespace kvserve::cli {

// Prints "kvserve <command>: error: <status>" to stderr; returns exit code 1.
int ReportError(std::string_view command, const Status& status);

// A progress line on stderr: "[command] message".
template <typename... Args>
void Progress(std::string_view command, fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "[{}] {}\n", command, fmt::format(format, std::forward<Args>(args)...));
  std::fflush(stderr);
}

// A lab::Progress that prints each line as Progress(command, line).
lab::Progress ProgressTo(std::string_view command);

// The global --data-dir option (main.cc binds it; "" when not given).
std::string& DataDirFlag();
// Where the default data files are: lab::FindDataDirectory(DataDirFlag()),
// i.e. --data-dir, $KVSERVE_DATA_DIR, the current directory, the install
// prefix, the source tree; NotFound saying how to point at them.
Result<std::string> DataDirectory();
// `path` when the user gave it (`user_set`), else <data directory>/`path`.
Result<std::string> DefaultDataFile(const std::string& path, bool user_set);

// Shared with the lab (experiments/lab.h, experiments/profile_inputs.h).
using lab::GBPerSecond;
using lab::HumanBytes;
using lab::LoadHeadScoresFor;
using lab::NeedsHeadScores;
using lab::NowSeconds;
using lab::ReadBinaryFile;
using lab::ResolveProfile;
using lab::ResolveThreads;
using lab::RoundTripRate;
using lab::ShapeString;
using lab::SplitProfileList;
using lab::WriteBinaryFile;

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_CLI_UTIL_H_
