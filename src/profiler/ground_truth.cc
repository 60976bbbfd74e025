// Copyright kvserve authors. Recorded ground truth: every profile of a space
// with its quality and codec metrics on one workload.
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "kvserve/profiler.h"

namespace kvserve {
namespace {

using Json = nlohmann::json;
constexpr std::string_view kFormat = "kvserve-ground-truth";

class GroundTruthEvaluator final : public Evaluator {
 public:
  explicit GroundTruthEvaluator(const GroundTruth& truth) : truth_(truth) {
    for (size_t i = 0; i < truth.rows.size(); ++i) index_.emplace(truth.rows[i].spec, i);
  }
  std::string name() const override { return "ground-truth:" + truth_.evaluator; }
  bool is_proxy() const override { return truth_.quality_kind == kReconstructionProxyLabel; }
  Result<QualityEstimate> Evaluate(const Profile& profile) override {
    auto it = index_.find(profile.ToString());
    if (it == index_.end()) {
      return Status::NotFound("ground truth has no row for " + profile.ToString());
    }
    return PointEstimate(truth_.rows[it->second].quality);
  }

 private:
  const GroundTruth& truth_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace

Result<GroundTruth> GroundTruth::FromJson(std::string_view text) {
  try {
    const Json doc = Json::parse(text);
    if (doc.value("format", std::string()) != kFormat) {
      return Status::Corruption("ground truth: format is not " + std::string(kFormat));
    }
    if (doc.value("version", 0) != 1) return Status::NotSupported("ground truth: version");
    GroundTruth g;
    g.workload = doc.at("workload").get<std::string>();
    g.quality_kind = doc.at("quality_kind").get<std::string>();
    g.evaluator = doc.at("evaluator").get<std::string>();
    g.source = doc.value("source", std::string());
    const std::vector<std::string> expected = {"spec", "quality", "compression_ratio",
                                               "encode_bytes_per_second",
                                               "decode_bytes_per_second"};
    if (doc.at("columns").get<std::vector<std::string>>() != expected) {
      return Status::Corruption("ground truth: unexpected columns");
    }
    for (const Json& r : doc.at("rows")) {
      GroundTruthRow row;
      row.spec = r.at(0).get<std::string>();
      row.quality = r.at(1).get<double>();
      row.codec.compression_ratio = r.at(2).get<double>();
      row.codec.encode_bytes_per_second = r.at(3).get<double>();
      row.codec.decode_bytes_per_second = r.at(4).get<double>();
      g.rows.push_back(std::move(row));
    }
    return g;
  } catch (const Json::exception& e) {
    return Status::Corruption(std::string("ground truth: ") + e.what());
  }
}

Result<GroundTruth> GroundTruth::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  auto g = FromJson(text.str());
  if (!g.ok()) return g.status().WithContext(path);
  return g;
}

std::string GroundTruth::ToJson() const {
  // One row per line: diffs of a regenerated table stay readable.
  Json head;
  head["format"] = kFormat;
  head["version"] = 1;
  head["workload"] = workload;
  head["quality_kind"] = quality_kind;
  head["evaluator"] = evaluator;
  head["source"] = source;
  head["columns"] = {"spec", "quality", "compression_ratio", "encode_bytes_per_second",
                     "decode_bytes_per_second"};
  std::string out = "{\n";
  for (const auto& [key, value] : head.items()) {
    out += "  " + Json(key).dump() + ": " + value.dump() + ",\n";
  }
  out += "  \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const GroundTruthRow& r = rows[i];
    Json row = {r.spec, r.quality, r.codec.compression_ratio, r.codec.encode_bytes_per_second,
                r.codec.decode_bytes_per_second};
    out += "    " + row.dump() + (i + 1 < rows.size() ? ",\n" : "\n");
  }
  out += "  ]\n}\n";
  return out;
}

Result<std::vector<Candidate>> GroundTruth::Candidates() const {
  std::vector<Candidate> out;
  out.reserve(rows.size());
  for (const GroundTruthRow& r : rows) {
    auto p = Profile::Parse(r.spec);
    if (!p.ok()) return Status::Corruption("ground truth: " + p.status().message());
    out.push_back({std::move(*p), r.codec});
  }
  return out;
}

std::unique_ptr<Evaluator> GroundTruth::MakeEvaluator() const {
  return std::make_unique<GroundTruthEvaluator>(*this);
}

int GroundTruth::BestFeasible(double quality_min) const {
  int best = -1;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].quality >= quality_min &&
        (best < 0 || rows[i].codec.compression_ratio > rows[best].codec.compression_ratio)) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

Result<GroundTruth> GenerateGroundTruth(const StrategySpace& space, const KvView& kv,
                                        const HeadScores* head_scores, std::string workload,
                                        std::string source,
                                        const std::function<void(int, int)>& progress) {
  GroundTruth g;
  g.workload = std::move(workload);
  g.quality_kind = std::string(kReconstructionProxyLabel);
  g.evaluator = "proxy:reconstruction-snr";
  g.source = std::move(source);
  for (int i = 0; i < space.size(); ++i) {
    const Profile& p = space.profiles()[i];
    auto m = MeasureOnKv(p, kv, head_scores, 1);
    if (!m.ok()) return m.status().WithContext(p.ToString());
    g.rows.push_back({p.ToString(), m->proxy_quality, m->codec});
    if (progress) progress(i + 1, space.size());
  }
  return g;
}

}  // namespace kvserve
