// Copyright kvserve authors. Tokenizer encode speed: tokens/s of
// kvserve::Tokenizer::Encode on one thread over the paragraphs of a text
// file (split at blank lines, as scripts/data/tokenizer_reference.mjs
// --bench splits it for the reference), best of --repeats. Prints one JSON
// line. scripts/bench_tokenizer.sh runs it next to the reference.
//   tokenizer_bench --tokenizer DIR_OR_FILE --text FILE [--repeats 3]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kvserve/runtime.h"

namespace {

std::vector<std::string> Paragraphs(const std::string& text) {
  std::vector<std::string> docs;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n\n", start);
    if (end == std::string::npos) end = text.size();
    if (end > start) docs.push_back(text.substr(start, end - start));
    start = end;
    while (start < text.size() && text[start] == '\n') ++start;
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path, text_path;
  int repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer")) {
      tokenizer_path = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--text")) {
      text_path = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--repeats")) {
      repeats = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (tokenizer_path.empty() || text_path.empty() || repeats < 1) {
    std::fprintf(stderr, "usage: tokenizer_bench --tokenizer PATH --text FILE [--repeats N]\n");
    return 2;
  }
  auto tokenizer = kvserve::Tokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  std::ifstream in(text_path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (!in) {
    std::fprintf(stderr, "%s: cannot read\n", text_path.c_str());
    return 1;
  }
  const std::vector<std::string> docs = Paragraphs(buffer.str());
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  double best = 1e300;
  size_t tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (const auto& d : docs) {
      auto ids = (*tokenizer)->Encode(d);
      if (!ids.ok()) {
        std::fprintf(stderr, "%s\n", ids.status().ToString().c_str());
        return 1;
      }
      n += ids->size();
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    tokens = n;
  }
  std::printf("{\"impl\": \"kvserve\", \"docs\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, "
              "\"tokens_per_second\": %.1f}\n",
              docs.size(), bytes, tokens, best, tokens / best);
  return 0;
}
