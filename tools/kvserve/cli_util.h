// Copyright kvserve authors. Helpers shared by the CLI's sub-commands:
// error reporting, progress lines, file I/O, profile resolution, formatting.
#ifndef KVSERVE_TOOLS_KVSERVE_CLI_UTIL_H_
#define KVSERVE_TOOLS_KVSERVE_CLI_UTIL_H_

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
// True when the profile's quantizer reads per-head retrieval scores.
bool NeedsHeadScores(const Profile& profile);
// Loads `path` if non-empty. If the profile needs scores and none are given,
// InvalidArgument with a hint on how to get a score file.
Result<std::unique_ptr<HeadScores>> LoadHeadScoresFor(const Profile& profile,
                                                      const std::string& path,
                                                      const KvShape& shape);

// "1.50 GiB", "12.0 KiB", "17 B".
std::string HumanBytes(uint64_t bytes);
// GB/s (1e9 bytes per second) of `bytes` processed in `seconds`.
double GBPerSecond(uint64_t bytes, double seconds);
// Round-trip throughput s_p = 1/(1/enc + 1/dec) of two rates.
double RoundTripRate(double encode_rate, double decode_rate);
// "32x8x4096x128" (layers x kv_heads x tokens x head_dim).
std::string ShapeString(const KvShape& shape);

// Monotonic wall clock in seconds.
inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Resolves a thread-count option (0 = hardware concurrency).
int ResolveThreads(int threads);

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_CLI_UTIL_H_
