// Copyright kvserve authors. kvserve_cuda_bench: runs kvserve::cuda::RunBench
// and prints the Markdown table docs/benchmarks.md records.
//
//   kvserve_cuda_bench [--tokens 1024,8192,32768] [--repeats 20]
//                      [--presets kivi-2,kvserve-h2r] [--no-verify] [--no-stages]
//                      [--dump-cache FILE] [--dump-symbols FILE]
//                      [--dump-profile SPEC] [--out FILE]
// --dump-cache / --dump-symbols write the 8K-token cache and the rANS input
// symbols of --dump-profile (default identity+kivi(k=2,v=2,residual=128)+rans)
// for it, for measuring other codecs on the same bytes (docs/cuda.md).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/cuda_bench.h"

namespace {

// Splits at commas outside parentheses (profile specs have commas inside).
std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::string item;
  int depth = 0;
  for (char c : s) {
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (c == ',' && depth == 0) {
      if (!item.empty()) out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  kvserve::cuda::BenchOptions options;
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--tokens" && has_value) {
      options.tokens.clear();
      for (const std::string& t : Split(argv[++i])) options.tokens.push_back(std::atoi(t.c_str()));
    } else if (arg == "--repeats" && has_value) {
      options.repeats = std::atoi(argv[++i]);
    } else if (arg == "--presets" && has_value) {
      options.presets = Split(argv[++i]);
    } else if (arg == "--no-verify") {
      options.verify_with_cpu = false;
    } else if (arg == "--no-stages") {
      options.stages = false;
    } else if (arg == "--dump-cache" && has_value) {
      options.dump_cache = argv[++i];
    } else if (arg == "--dump-symbols" && has_value) {
      options.dump_symbols = argv[++i];
    } else if (arg == "--dump-profile" && has_value) {
      options.dump_profile = argv[++i];
    } else if (arg == "--out" && has_value) {
      out_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--tokens N,..] [--repeats N] [--presets a,b] [--no-verify] [--no-stages]\n"
                   "          [--dump-cache FILE] [--dump-symbols FILE] [--dump-profile SPEC] [--out FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  auto rows = kvserve::cuda::RunBench(options);
  if (!rows.ok()) {
    std::fprintf(stderr, "bench: %s\n", rows.status().ToString().c_str());
    return rows.status().code() == kvserve::StatusCode::kNotSupported ? 0 : 1;
  }
  const std::string table = "device: " + kvserve::cuda::DeviceName() + "\n\n" +
                            kvserve::cuda::FormatBenchTable(*rows);
  std::fputs(table.c_str(), stdout);
  if (!out_path.empty()) {
    if (FILE* f = std::fopen(out_path.c_str(), "w")) {
      std::fputs(table.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
