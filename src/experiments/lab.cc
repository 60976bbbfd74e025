// Copyright kvserve authors. experiments/lab.h.
#include "experiments/lab.h"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace kvserve::lab {
namespace fs = std::filesystem;
namespace {

bool IsDataDirectory(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kDataMarker, ec);
}

// <prefix>/share/kvserve for an executable at <prefix>/bin/kvserve.
fs::path InstalledDataDirectory() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  fs::path prefix = exe.parent_path();
  for (const auto& part : fs::path(KVSERVE_INSTALL_BIN_DIR)) {
    if (!part.empty()) prefix = prefix.parent_path();
  }
  return prefix / KVSERVE_INSTALL_DATA_SUBDIR;
}

}  // namespace

Result<std::string> FindDataDirectory(const std::string& flag) {
  auto named = [](const std::string& dir, const char* how) -> Result<std::string> {
    if (IsDataDirectory(dir)) return dir;
    return Status::NotFound(dir + " (" + how + ") is not a kvserve data directory: it has no " +
                            kDataMarker);
  };
  if (!flag.empty()) return named(flag, "--data-dir");
  if (const char* env = std::getenv("KVSERVE_DATA_DIR"); env != nullptr && *env != 0)
    return named(env, "$KVSERVE_DATA_DIR");
  std::vector<fs::path> tried = {fs::path("."), InstalledDataDirectory(),
                                 fs::path(KVSERVE_INSTALL_DATA_DIR), fs::path(KVSERVE_SOURCE_DIR)};
  std::string places;
  for (const fs::path& dir : tried) {
    if (dir.empty()) continue;
    if (IsDataDirectory(dir)) return dir.string();
    places += (places.empty() ? "" : ", ") + dir.string();
  }
  return Status::NotFound(
      std::string("cannot find kvserve's data files (") + kDataMarker + ") in " + places +
      ": pass --data-dir DIR (before the command) or set KVSERVE_DATA_DIR to a kvserve "
      "checkout or to <prefix>/share/kvserve of an install");
}

std::string DataPath(const std::string& data_dir, const std::string& relative) {
  // From the current directory the path stays as given (as reports print it).
  if (relative.empty() || fs::path(relative).is_absolute() || data_dir == ".") return relative;
  return (fs::path(data_dir) / relative).string();
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return Status::NotFound(path + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IOError("error reading " + path);
  return text.str();
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IOError("cannot write " + path);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out) return Status::IOError("error writing " + path);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Status::IOError("cannot write " + path + ": " + ec.message());
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> ReadBinaryFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound("no such file: " + path);
    return Status::IOError("cannot open " + path + ": " + std::strerror(err));
  }
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) bytes.insert(bytes.end(), buffer, buffer + n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return Status::IOError("cannot read " + path);
  return bytes;
}

Status WriteBinaryFile(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::IOError("cannot create " + tmp + ": " + std::strerror(errno));
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    return Status::IOError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IOError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return in ? load : -1;
}

std::string MachineDescription() {
  utsname u{};
  ::uname(&u);
  std::string load = "unknown";
  std::ifstream("/proc/loadavg") >> load;
  return fmt::format("{} {} {}, {} cores, 1-min load average {} at start", u.sysname, u.release,
                     u.machine, std::thread::hardware_concurrency(), load);
}

std::vector<std::string> SplitWords(const std::string& list) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : list + ",") {
    if (c == ',' || c == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

std::vector<std::string> SplitList(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(q * static_cast<double>(values.size()));
  const size_t index = rank <= 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

SampleSummary Summarize(std::vector<double> values) {
  SampleSummary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = values.size();
  s.median = values[values.size() / 2];
  s.min = values.front();
  s.max = values.back();
  return s;
}

std::vector<uint8_t> RandomBytes(size_t bytes, uint64_t seed) {
  std::vector<uint8_t> out(bytes);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t r = rng();
    std::memcpy(out.data() + i, &r, std::min<size_t>(8, bytes - i));
  }
  return out;
}

double Mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) v /= 1024.0, ++unit;
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.2f} {}", v, kUnits[unit]);
}

double GBPerSecond(uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

double RoundTripRate(double encode_rate, double decode_rate) {
  if (encode_rate <= 0 || decode_rate <= 0) return 0.0;
  return 1.0 / (1.0 / encode_rate + 1.0 / decode_rate);
}

std::string ShapeString(const KvShape& s) {
  return fmt::format("{}x{}x{}x{}", s.layers, s.kv_heads, s.tokens, s.head_dim);
}

int ResolveThreads(int threads) {
  if (threads > 0) return threads;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

bool NeedsHeadScores(const Profile& profile) {
  return profile.quantizer() == QuantizerType::kMixHQ || profile.quantizer() == QuantizerType::kDuo;
}

}  // namespace kvserve::lab
