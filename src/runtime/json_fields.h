// Copyright kvserve authors. Field readers for tokenizer.json that never
// throw: a missing field, or one of another type, reads as the fallback.
#ifndef KVSERVE_RUNTIME_JSON_FIELDS_H_
#define KVSERVE_RUNTIME_JSON_FIELDS_H_

#include <string>

#include <nlohmann/json.hpp>

namespace kvserve::runtime {

// j[key] when `j` is an object and j[key] is a boolean, else `fallback`.
inline bool BoolField(const nlohmann::json& j, const char* key, bool fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// j[key] when `j` is an object and j[key] is a string, else `fallback`.
inline std::string StringField(const nlohmann::json& j, const char* key, std::string fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_JSON_FIELDS_H_
