// Copyright kvserve authors. experiments/preset_report.h.
#include "experiments/preset_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "kvserve/profile.h"

namespace kvserve::lab {

nlohmann::json PresetsJson() {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : Presets()) {
    auto profile = Profile::Parse(p.spec);
    out.push_back({{"name", p.name},
                   {"spec", p.spec},
                   {"description", p.description},
                   {"lossless", profile.ok() && profile->IsLossless()}});
  }
  return out;
}

std::string PresetsText(bool params) {
  size_t name_w = 6, spec_w = 4;
  for (const auto& p : Presets()) {
    name_w = std::max(name_w, p.name.size());
    spec_w = std::max(spec_w, p.spec.size());
  }
  std::string out =
      fmt::format("{:<{}}  {:<{}}  {}\n", "preset", name_w, "spec", spec_w, "description");
  out += fmt::format("{:-<{}}  {:-<{}}  {:-<11}\n", "", name_w, "", spec_w, "");
  for (const auto& p : Presets())
    out += fmt::format("{:<{}}  {:<{}}  {}\n", p.name, name_w, p.spec, spec_w, p.description);
  if (params) {
    out += "\nparameters (key, applies to, [min, max], default: meaning)\n";
    static const char* kScope[] = {"transform", "quantizer", "codec", "pipeline"};
    for (const auto& info : AllParams()) {
      out += fmt::format("  {:<10} {:<9} [{}, {}] default {}: {}\n", info.key,
                         kScope[static_cast<int>(info.scope)], info.min_value, info.max_value,
                         info.default_value, info.help);
    }
  }
  return out;
}

}  // namespace kvserve::lab
