// Copyright kvserve authors. `kvserve presets`: the built-in profiles.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli_util.h"
#include "command.h"
#include "experiments/preset_report.h"

namespace kvserve::cli {
namespace {

struct PresetsArgs {
  bool json = false;
  bool params = false;
};

int RunPresets(const PresetsArgs& a) {
  if (a.json) {
    std::cout << lab::PresetsJson().dump(2) << "\n";
  } else {
    fmt::print("{}", lab::PresetsText(a.params));
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
