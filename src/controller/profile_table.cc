// Copyright kvserve authors. Profile tables: the profiler's output and the
// controller's input. Format in kvserve/controller.h and docs/controller.md.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kvserve/controller.h"

namespace kvserve {
namespace {

constexpr std::string_view kFormat = "kvserve-profile-table";

Status ValidateRow(const ProfileCost& p) {
  const std::string where = "profile \"" + p.spec + "\": ";
  if (p.spec.empty()) return Status::InvalidArgument("profile with empty spec");
  if (p.spec == "none") {
    return Status::InvalidArgument(where + "raw is implicit, do not list it");
  }
  if (!(p.compression_ratio > 0.0) || !std::isfinite(p.compression_ratio)) {
    return Status::InvalidArgument(where + "compression_ratio must be > 0");
  }
  if (!(p.encode_bytes_per_second > 0.0) || !(p.decode_bytes_per_second > 0.0)) {
    return Status::InvalidArgument(where + "throughputs must be > 0");
  }
  if (!(p.overhead_seconds >= 0.0) || !std::isfinite(p.overhead_seconds)) {
    return Status::InvalidArgument(where + "overhead_seconds must be finite, >= 0");
  }
  for (const auto& [w, q] : p.quality) {
    if (!std::isfinite(q)) {
      return Status::InvalidArgument(where + "quality for \"" + w + "\" not finite");
    }
  }
  return Status::Ok();
}

ProfileCost RawProfile() {
  ProfileCost raw;
  raw.spec = "none";
  return raw;  // cr 1, infinite throughput, t0 0; quality handled by Quality()
}

}  // namespace

Result<ProfileTable> ProfileTable::FromRows(std::vector<ProfileCost> rows) {
  return FromRowsAndWorkloads(std::move(rows), {});
}

Result<ProfileTable> ProfileTable::FromRowsAndWorkloads(
    std::vector<ProfileCost> rows, std::vector<std::string> workloads) {
  std::set<std::string, std::less<>> specs;
  for (const ProfileCost& row : rows) {
    KVSERVE_RETURN_IF_ERROR(ValidateRow(row));
    if (!specs.insert(row.spec).second) {
      return Status::InvalidArgument("duplicate profile spec \"" + row.spec + "\"");
    }
  }
  ProfileTable table;
  if (workloads.empty()) {
    std::set<std::string> names;
    for (const ProfileCost& row : rows) {
      for (const auto& [w, q] : row.quality) names.insert(w);
    }
    workloads.assign(names.begin(), names.end());
  } else {
    std::set<std::string> names(workloads.begin(), workloads.end());
    if (names.size() != workloads.size()) {
      return Status::InvalidArgument("duplicate workload name");
    }
  }
  table.workloads_ = std::move(workloads);
  table.profiles_.push_back(RawProfile());
  for (ProfileCost& row : rows) table.profiles_.push_back(std::move(row));
  const size_t w_count = table.workloads_.size();
  table.quality_.assign(table.profiles_.size() * w_count,
                        -std::numeric_limits<double>::infinity());
  for (size_t p = 0; p < table.profiles_.size(); ++p) {
    for (size_t w = 0; w < w_count; ++w) {
      if (p == 0) {
        table.quality_[w] = 1.0;
        continue;
      }
      auto it = table.profiles_[p].quality.find(table.workloads_[w]);
      if (it != table.profiles_[p].quality.end()) {
        table.quality_[p * w_count + w] = it->second;
      }
    }
  }
  return table;
}

Result<ProfileTable> ProfileTable::FromJson(std::string_view json) {
  try {
    const nlohmann::json doc = nlohmann::json::parse(json);
    if (!doc.is_object()) return Status::Corruption("profile table: not an object");
    if (doc.contains("format") && doc.at("format").get<std::string>() != kFormat) {
      return Status::Corruption("profile table: format is not " + std::string(kFormat));
    }
    if (doc.contains("version") && doc.at("version").get<int>() != 1) {
      return Status::NotSupported("profile table: only version 1 is supported");
    }
    std::vector<std::string> workloads;
    if (doc.contains("workloads")) {
      workloads = doc.at("workloads").get<std::vector<std::string>>();
    }
    std::vector<ProfileCost> rows;
    for (const nlohmann::json& r : doc.at("profiles")) {
      ProfileCost p;
      p.spec = r.at("spec").get<std::string>();
      p.compression_ratio = r.at("compression_ratio").get<double>();
      p.encode_bytes_per_second = r.at("encode_bytes_per_second").get<double>();
      p.decode_bytes_per_second = r.at("decode_bytes_per_second").get<double>();
      p.overhead_seconds = r.value("overhead_seconds", 0.0);
      p.streamed = r.value("streamed", true);
      if (r.contains("quality")) {
        for (const auto& [w, q] : r.at("quality").items()) {
          p.quality[w] = q.get<double>();
        }
      }
      rows.push_back(std::move(p));
    }
    for (const ProfileCost& p : rows) {
      for (const auto& [w, q] : p.quality) {
        if (!workloads.empty() &&
            std::find(workloads.begin(), workloads.end(), w) == workloads.end()) {
          return Status::InvalidArgument("profile \"" + p.spec +
                                         "\": quality for undeclared workload \"" +
                                         w + "\"");
        }
      }
    }
    return FromRowsAndWorkloads(std::move(rows), std::move(workloads));
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(std::string("profile table: ") + e.what());
  }
}

Result<ProfileTable> ProfileTable::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IOError("cannot read " + path);
  Result<ProfileTable> table = FromJson(text.str());
  if (!table.ok()) return table.status().WithContext(path);
  return table;
}

std::string ProfileTable::ToJson() const {
  nlohmann::json doc;
  doc["format"] = kFormat;
  doc["version"] = 1;
  doc["workloads"] = workloads_;
  doc["profiles"] = nlohmann::json::array();
  for (size_t i = 1; i < profiles_.size(); ++i) {
    const ProfileCost& p = profiles_[i];
    nlohmann::json r;
    r["spec"] = p.spec;
    r["compression_ratio"] = p.compression_ratio;
    r["encode_bytes_per_second"] = p.encode_bytes_per_second;
    r["decode_bytes_per_second"] = p.decode_bytes_per_second;
    r["overhead_seconds"] = p.overhead_seconds;
    if (!p.streamed) r["streamed"] = false;
    nlohmann::json q = nlohmann::json::object();
    for (const auto& [w, v] : p.quality) q[w] = v;
    r["quality"] = q;
    doc["profiles"].push_back(r);
  }
  return doc.dump(2) + "\n";
}

Result<int> ProfileTable::WorkloadIndex(std::string_view name) const {
  for (size_t i = 0; i < workloads_.size(); ++i) {
    if (workloads_[i] == name) return static_cast<int>(i);
  }
  return Status::NotFound("unknown workload \"" + std::string(name) + "\"");
}

double ProfileTable::Quality(int index, int workload) const {
  return quality_[static_cast<size_t>(index) * workloads_.size() +
                  static_cast<size_t>(workload)];
}

}  // namespace kvserve
