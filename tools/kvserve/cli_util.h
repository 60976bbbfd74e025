// Copyright kvserve authors. Helpers shared by the CLI's sub-commands:
// error reporting, progress lines, file I/O, profile resolution, formatting.
#ifndef KVSERVE_TOOLS_KVSERVE_CLI_UTIL_H_
#define KVSERVE_TOOLS_KVSERVE_CLI_UTIL_H_

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "experiments/lab.h"
#include "kvserve/codec.h"
#include "kvserve/profile.h"
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

// Reads a whole file. NotFound / IOError.
Result<std::vector<uint8_t>> ReadBinaryFile(const std::string& path);
// Writes `bytes` to `path` via a temporary file renamed into place. IOError.
Status WriteBinaryFile(const std::string& path, std::span<const uint8_t> bytes);

// Parses a spec string or preset name; the error names the bad input.
Result<Profile> ResolveProfile(std::string_view spec);
// Splits each item on commas outside parentheses ("kivi-2,kivi(k=2,v=4)"
// -> "kivi-2", "kivi(k=2,v=4)") and trims spaces; empty pieces are dropped.
std::vector<std::string> SplitProfileList(const std::vector<std::string>& items);
// Loads `path` if non-empty. If the profile needs scores and none are given,
// InvalidArgument with a hint on how to get a score file.
Result<std::unique_ptr<HeadScores>> LoadHeadScoresFor(const Profile& profile,
                                                      const std::string& path,
                                                      const KvShape& shape);

// The global --data-dir option (main.cc binds it; "" when not given).
std::string& DataDirFlag();
// Where the default data files are: lab::FindDataDirectory(DataDirFlag()),
// i.e. --data-dir, $KVSERVE_DATA_DIR, the current directory, the install
// prefix, the source tree; NotFound saying how to point at them.
Result<std::string> DataDirectory();
// `path` when the user gave it (`user_set`), else <data directory>/`path`.
Result<std::string> DefaultDataFile(const std::string& path, bool user_set);

// Shared with the lab (experiments/lab.h).
using lab::GBPerSecond;
using lab::HumanBytes;
using lab::NeedsHeadScores;
using lab::NowSeconds;
using lab::ResolveThreads;
using lab::RoundTripRate;
using lab::ShapeString;

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_CLI_UTIL_H_
