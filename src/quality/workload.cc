// Copyright kvserve authors. Eval-sample files (scripts/data/make_workloads.py).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kvserve/quality.h"

namespace kvserve {
namespace {

Status Bad(const std::string& path, int line, const std::string& what) {
  return Status::Corruption(path + ":" + std::to_string(line) + ": " + what);
}

Status ParseIds(const nlohmann::json& obj, const char* key, const std::string& path, int line,
                std::vector<int32_t>* out) {
  auto it = obj.find(key);
  if (it == obj.end()) return Bad(path, line, std::string("missing field \"") + key + "\"");
  if (!it->is_array() || it->empty()) {
    return Bad(path, line, std::string("\"") + key + "\" must be a non-empty array of token ids");
  }
  out->clear();
  out->reserve(it->size());
  for (const auto& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Bad(path, line, std::string("\"") + key + "\" holds a value that is not a token id");
    }
    out->push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return Status::Ok();
}

Result<EvalSample> ParseSample(const nlohmann::json& obj, const std::string& path, int line) {
  if (!obj.is_object()) return Bad(path, line, "a sample must be a JSON object");
  EvalSample s;
  auto id = obj.find("id");
  if (id == obj.end() || !id->is_string() || id->get<std::string>().empty()) {
    return Bad(path, line, "missing or non-string \"id\"");
  }
  s.id = id->get<std::string>();
  auto metric = obj.find("metric");
  if (metric == obj.end() || !metric->is_string()) {
    return Bad(path, line, "missing \"metric\" (exact_match or perplexity)");
  }
  if (*metric == "exact_match") {
    s.metric = QualityMetric::kExactMatch;
  } else if (*metric == "perplexity") {
    s.metric = QualityMetric::kPerplexity;
  } else {
    return Bad(path, line, "unknown metric \"" + metric->get<std::string>() +
                               "\" (exact_match or perplexity)");
  }
  for (auto [key, dst] : {std::pair{"workload", &s.workload}, std::pair{"prompt", &s.prompt},
                          std::pair{"answer", &s.answer}}) {
    auto it = obj.find(key);
    if (it == obj.end()) continue;
    if (!it->is_string()) return Bad(path, line, std::string("\"") + key + "\" must be a string");
    *dst = it->get<std::string>();
  }
  KVSERVE_RETURN_IF_ERROR(ParseIds(obj, "prompt_ids", path, line, &s.prompt_ids));
  KVSERVE_RETURN_IF_ERROR(ParseIds(obj, "answer_ids", path, line, &s.answer_ids));
  return s;
}

}  // namespace

Result<std::vector<EvalSample>> LoadWorkload(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::NotFound(path + ": no such workload file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Status::IOError(path + ": read failed");
  const std::string text = buf.str();
  std::vector<EvalSample> out;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return Status::Corruption(path + ": empty workload file");
  if (text[first] == '[') {  // one JSON array
    nlohmann::json arr = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (arr.is_discarded() || !arr.is_array()) return Bad(path, 1, "not valid JSON");
    for (size_t i = 0; i < arr.size(); ++i) {
      KVSERVE_ASSIGN_OR_RETURN(EvalSample s, ParseSample(arr[i], path + " [" + std::to_string(i) + "]", 1));
      out.push_back(std::move(s));
    }
  } else {  // JSONL
    std::istringstream lines(text);
    std::string line;
    int no = 0;
    while (std::getline(lines, line)) {
      ++no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (obj.is_discarded()) return Bad(path, no, "not valid JSON");
      KVSERVE_ASSIGN_OR_RETURN(EvalSample s, ParseSample(obj, path, no));
      out.push_back(std::move(s));
    }
  }
  if (out.empty()) return Status::Corruption(path + ": no samples");
  std::set<std::string> ids;
  for (const EvalSample& s : out) {
    if (!ids.insert(s.id).second) return Status::Corruption(path + ": duplicate id \"" + s.id + "\"");
  }
  return out;
}

Result<std::string> ResolveWorkloadPath(const std::string& name_or_file,
                                        const std::string& eval_dir) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(name_or_file, ec)) return name_or_file;
  const std::string candidate = eval_dir + "/" + name_or_file + ".jsonl";
  if (name_or_file.find('/') == std::string::npos &&
      std::filesystem::is_regular_file(candidate, ec)) {
    return candidate;
  }
  return Status::NotFound("workload \"" + name_or_file + "\": neither a file nor " + candidate +
                          "; build the eval sets (data/eval/<name>.jsonl for qa, math, code, prose, "
                          "multihop, unseen, qa-hard, multihop-hard, code-hard) with "
                          "scripts/data/build_all.sh (about 5 min)");
}

Result<std::vector<EvalSample>> HeldOutSamples(const std::vector<EvalSample>& all,
                                               int search_samples, uint64_t seed) {
  const int total = static_cast<int>(all.size());
  if (search_samples <= 0 || search_samples >= total) {
    return Status::InvalidArgument("a search of " +
                                   (search_samples <= 0 ? std::string("every sample")
                                                        : std::to_string(search_samples) + " samples") +
                                   " of " + std::to_string(total) + " leaves none to hold out");
  }
  std::vector<bool> searched(all.size(), false);
  for (int i : ChooseSubset(total, search_samples, seed)) searched[i] = true;
  std::vector<EvalSample> out;
  out.reserve(all.size() - search_samples);
  for (size_t i = 0; i < all.size(); ++i)
    if (!searched[i]) out.push_back(all[i]);
  return out;
}

}  // namespace kvserve
