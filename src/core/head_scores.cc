// Copyright kvserve authors. HeadScores file I/O (include/kvserve/codec.h):
// {"layers":L,"kv_heads":H,"scores":[[H numbers], ... L rows]}.
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "kvserve/codec.h"

namespace kvserve {
namespace {

using Json = nlohmann::json;

// Far beyond any real model (layers * kv_heads is a few thousand); keeps a
// hostile file from asking for a huge allocation.
constexpr int64_t kMaxDimension = 1 << 16;
constexpr int64_t kMaxScores = 1 << 24;

Status Bad(const std::string& path, const std::string& what) {
  return Status::Corruption("head scores '" + path + "': " + what);
}

// Reads a positive integer field of `root`.
Status ReadDimension(const Json& root, const char* field, const std::string& path, int* out) {
  auto it = root.find(field);
  if (it == root.end()) return Bad(path, std::string("missing '") + field + "'");
  if (!it->is_number_integer()) return Bad(path, std::string("'") + field + "' must be an integer");
  if (it->is_number_unsigned() ? it->get<uint64_t>() > static_cast<uint64_t>(kMaxDimension)
                               : (it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxDimension)) {
    return Bad(path, std::string("'") + field + "' must be in [1, " +
                         std::to_string(kMaxDimension) + "]");
  }
  *out = static_cast<int>(it->get<int64_t>());
  if (*out < 1) return Bad(path, std::string("'") + field + "' must be positive");
  return Status::Ok();
}

Result<HeadScores> Parse(const std::string& text, const std::string& path) {
  Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Bad(path, "not valid JSON");
  if (!root.is_object()) return Bad(path, "top level must be an object");
  HeadScores hs;
  KVSERVE_RETURN_IF_ERROR(ReadDimension(root, "layers", path, &hs.layers));
  KVSERVE_RETURN_IF_ERROR(ReadDimension(root, "kv_heads", path, &hs.kv_heads));
  if (static_cast<int64_t>(hs.layers) * hs.kv_heads > kMaxScores) {
    return Bad(path, "layers * kv_heads exceeds " + std::to_string(kMaxScores));
  }
  auto scores = root.find("scores");
  if (scores == root.end() || !scores->is_array()) return Bad(path, "missing array 'scores'");
  if (scores->size() != static_cast<size_t>(hs.layers)) {
    return Bad(path, "'scores' has " + std::to_string(scores->size()) + " rows, layers is " +
                         std::to_string(hs.layers));
  }
  hs.scores.reserve(static_cast<size_t>(hs.layers) * hs.kv_heads);
  for (int l = 0; l < hs.layers; ++l) {
    const Json& row = (*scores)[static_cast<size_t>(l)];
    if (!row.is_array() || row.size() != static_cast<size_t>(hs.kv_heads)) {
      return Bad(path, "row " + std::to_string(l) + " must be an array of " +
                           std::to_string(hs.kv_heads) + " numbers");
    }
    for (int h = 0; h < hs.kv_heads; ++h) {
      const Json& v = row[static_cast<size_t>(h)];
      if (!v.is_number()) {
        return Bad(path, "scores[" + std::to_string(l) + "][" + std::to_string(h) +
                             "] is not a number");
      }
      double d = v.get<double>();
      float f = static_cast<float>(d);
      if (!std::isfinite(d) || !std::isfinite(f)) {
        return Bad(path, "scores[" + std::to_string(l) + "][" + std::to_string(h) +
                             "] is not a finite float");
      }
      hs.scores.push_back(f);
    }
  }
  return hs;
}

}  // namespace

Result<HeadScores> HeadScores::Load(const std::string& path) {
  try {
    std::error_code ec;
    auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status)) {
      return Status::NotFound("head scores '" + path + "': no such file");
    }
    if (std::filesystem::is_directory(status)) {
      return Status::IOError("head scores '" + path + "': is a directory");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::IOError("head scores '" + path + "': cannot open");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (in.bad()) return Status::IOError("head scores '" + path + "': read failed");
    return Parse(buffer.str(), path);
  } catch (const std::exception& e) {
    return Bad(path, e.what());
  }
}

Status HeadScores::Save(const std::string& path) const {
  if (layers < 1 || kv_heads < 1 || layers > kMaxDimension || kv_heads > kMaxDimension ||
      scores.size() != static_cast<size_t>(layers) * static_cast<size_t>(kv_heads)) {
    return Status::InvalidArgument("head scores: shape " + std::to_string(layers) + "x" +
                                   std::to_string(kv_heads) + " does not match " +
                                   std::to_string(scores.size()) + " scores");
  }
  for (float f : scores) {
    if (!std::isfinite(f)) return Status::InvalidArgument("head scores: non-finite score");
  }
  try {
    Json root = Json::object();
    root["layers"] = layers;
    root["kv_heads"] = kv_heads;
    Json rows = Json::array();
    for (int l = 0; l < layers; ++l) {
      Json row = Json::array();
      for (int h = 0; h < kv_heads; ++h) row.push_back(at(l, h));
      rows.push_back(std::move(row));
    }
    root["scores"] = std::move(rows);
    std::string text = root.dump() + "\n";
    // Write a sibling temporary and rename, so readers never see half a file.
    std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) return Status::IOError("head scores '" + path + "': cannot create " + tmp);
      out.write(text.data(), static_cast<std::streamsize>(text.size()));
      out.flush();
      if (!out) return Status::IOError("head scores '" + path + "': write failed");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
      std::filesystem::remove(tmp, ec);
      return Status::IOError("head scores '" + path + "': rename failed");
    }
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::IOError("head scores '" + path + "': " + e.what());
  }
}

}  // namespace kvserve
