// Copyright kvserve authors. `kvserve presets`: the built-in profiles.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <memory>

#include "cli_util.h"
#include "command.h"
#include "kvserve/profile.h"

namespace kvserve::cli {
namespace {

struct PresetsArgs {
  bool json = false;
  bool params = false;
};

int RunPresets(const PresetsArgs& a) {
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : Presets()) {
      auto profile = Profile::Parse(p.spec);
      out.push_back({{"name", p.name},
                     {"spec", p.spec},
                     {"description", p.description},
                     {"lossless", profile.ok() && profile->IsLossless()}});
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  size_t name_w = 6, spec_w = 4;
  for (const auto& p : Presets()) {
    name_w = std::max(name_w, p.name.size());
    spec_w = std::max(spec_w, p.spec.size());
  }
  fmt::print("{:<{}}  {:<{}}  {}\n", "preset", name_w, "spec", spec_w, "description");
  fmt::print("{:-<{}}  {:-<{}}  {:-<11}\n", "", name_w, "", spec_w, "");
  for (const auto& p : Presets()) {
    fmt::print("{:<{}}  {:<{}}  {}\n", p.name, name_w, p.spec, spec_w, p.description);
  }
  if (a.params) {
    fmt::print("\nparameters (key, applies to, [min, max], default: meaning)\n");
    for (const auto& info : AllParams()) {
      static const char* kScope[] = {"transform", "quantizer", "codec", "pipeline"};
      fmt::print("  {:<10} {:<9} [{}, {}] default {}: {}\n", info.key,
                 kScope[static_cast<int>(info.scope)], info.min_value, info.max_value,
                 info.default_value, info.help);
    }
  }
  return 0;
}

RunFn SetupPresets(CLI::App& sub) {
  auto a = std::make_shared<PresetsArgs>();
  sub.description(
      "List the built-in profiles: name, canonical spec and what it reproduces. A preset name "
      "is accepted wherever a profile spec is (e.g. `kvserve compress --profile kivi-2`).");
  sub.add_flag("--json", a->json, "print JSON instead of a table");
  sub.add_flag("--params", a->params, "also list every profile parameter with its bounds");
  return [a] { return RunPresets(*a); };
}

}  // namespace
}  // namespace kvserve::cli

KVSERVE_COMMAND(presets, "List the built-in compression profiles", kvserve::cli::SetupPresets);
