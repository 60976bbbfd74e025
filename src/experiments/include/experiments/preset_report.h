// Copyright kvserve authors. How `kvserve presets` lists the built-in
// profiles (kvserve/profile.h Presets, AllParams). Not part of the
// installed library.
#ifndef KVSERVE_EXPERIMENTS_PRESET_REPORT_H_
#define KVSERVE_EXPERIMENTS_PRESET_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>

namespace kvserve::lab {

// [{"name", "spec", "description", "lossless"}] for every preset, in
// Presets() order.
nlohmann::json PresetsJson();

// A table of every preset (name, spec, description) and, with `params`,
// every profile parameter: key, scope, bounds, default and meaning.
std::string PresetsText(bool params);

}  // namespace kvserve::lab

#endif  // KVSERVE_EXPERIMENTS_PRESET_REPORT_H_
