// Copyright kvserve authors. What every experiment of the lab shares: progress
// lines, the data directory, text files, and a description of the machine
// that measurements are recorded with. Not part of the installed library.
#ifndef KVSERVE_EXPERIMENTS_LAB_H_
#define KVSERVE_EXPERIMENTS_LAB_H_

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/status.h"

namespace kvserve::lab {

// Receives the progress lines of a long experiment ("calibrating profiles
// on ..."); the CLI prints them to stderr. May be empty.
using Progress = std::function<void(const std::string& line)>;

template <typename... Args>
void Note(const Progress& progress, fmt::format_string<Args...> format, Args&&... args) {
  if (progress) progress(fmt::format(format, std::forward<Args>(args)...));
}

// The file whose presence marks a kvserve data directory.
inline constexpr const char* kDataMarker = "configs/strategy_space.json";

// The directory the default data files (configs/, models/, docs/results/)
// are read from: `flag` when non-empty; else $KVSERVE_DATA_DIR; else the
// current directory when it is one (a source checkout); else the install
// prefix's share/kvserve next to the running executable; else the source
// tree the binary was built from. A flag or variable naming a directory
// without the marker is NotFound; so is finding none, with the places
// tried and how to say where the files are.
Result<std::string> FindDataDirectory(const std::string& flag);
// `data_dir`/`relative` (relative paths in configs are data-relative).
// "." (the current directory) leaves `relative` as it is.
std::string DataPath(const std::string& data_dir, const std::string& relative);

// Reads / writes a whole text file (writing via a sibling temporary renamed
// into place). NotFound / IOError naming the path.
Result<std::string> ReadTextFile(const std::string& path);
Status WriteTextFile(const std::string& path, const std::string& text);
// Reads a whole binary file: NotFound "no such file: PATH", IOError. Writes
// one via PATH.tmp renamed into place (nothing is left behind on failure):
// IOError naming the step that failed.
Result<std::vector<uint8_t>> ReadBinaryFile(const std::string& path);
Status WriteBinaryFile(const std::string& path, std::span<const uint8_t> bytes);

// Monotonic seconds; the process's CPU seconds (user + system); the 1-min
// load average (-1 when unknown).
double NowSeconds();
double ProcessCpuSeconds();
double LoadAverage();
// "Linux 6.1 x86_64, 2 cores, 1-min load average 0.42 at start": the load
// says whether other work shared the machine with a measurement.
std::string MachineDescription();

// Splits on commas and spaces, dropping empty pieces.
std::vector<std::string> SplitWords(const std::string& list);
// "a:1,b:2" -> {"a:1", "b:2"} (commas only; empty pieces dropped).
std::vector<std::string> SplitList(const std::string& list);

// The q-quantile (0..1, nearest rank) of `values`; 0 when empty.
double Percentile(std::vector<double> values, double q);
double Mean(const std::vector<double>& values);

// Repeated measurements of one quantity, summarised: `median` is the upper
// middle value (values[n/2] of the sorted values, so an odd count gives the
// true median), `min` and `max` the extremes; all 0 for no values.
struct SampleSummary {
  size_t count = 0;
  double median = 0, min = 0, max = 0;
};
SampleSummary Summarize(std::vector<double> values);

// `bytes` pseudo-random bytes from a seeded mt19937_64 (the same seed gives
// the same bytes): incompressible payloads for the transfer benches.
std::vector<uint8_t> RandomBytes(size_t bytes, uint64_t seed);

// "1.50 GiB", "12.0 KiB", "17 B".
std::string HumanBytes(uint64_t bytes);
// GB/s (1e9 bytes per second) of `bytes` processed in `seconds`.
double GBPerSecond(uint64_t bytes, double seconds);
// Round-trip throughput s_p = 1/(1/enc + 1/dec) of two rates.
double RoundTripRate(double encode_rate, double decode_rate);
// "32x8x4096x128" (layers x kv_heads x tokens x head_dim).
std::string ShapeString(const KvShape& shape);
// A thread-count option (0 = hardware concurrency).
int ResolveThreads(int threads);
// True when the profile's quantizer reads per-head retrieval scores (mixhq,
// duo).
bool NeedsHeadScores(const Profile& profile);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_LAB_H_
