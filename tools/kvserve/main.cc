// Copyright kvserve authors. `kvserve <command>`: the command-line front end
// of the library. Commands register themselves (command.h); this file only
// builds the parser and dispatches.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "cli_util.h"
#include "command.h"
#include "kvserve/version.h"

namespace kvserve::cli {

std::vector<CommandSpec>& Commands() {
  static std::vector<CommandSpec> commands;
  return commands;
}

}  // namespace kvserve::cli

int main(int argc, char** argv) {
  using kvserve::cli::Commands;
  CLI::App app{
      "kvserve: compress LLM KV caches (transform -> quantizer -> entropy codec) for "
      "disaggregated serving.\nRun `kvserve <command> --help` for a command's options."};
  app.name("kvserve");
  app.set_version_flag("--version", std::string("kvserve ") + kvserve::LibraryVersionString());
  app.add_option("--data-dir", kvserve::cli::DataDirFlag(),
                 "where the default data files (configs/, models/, docs/results/) are: a kvserve "
                 "checkout or <prefix>/share/kvserve (default: $KVSERVE_DATA_DIR, the current "
                 "directory, the install prefix, the source tree)");
  app.require_subcommand(1);
  app.fallthrough(false);

  // Commands with '_' in their identifier are spelled with '-' on the line.
  auto spelled = [](std::string_view name) {
    std::string s(name);
    std::replace(s.begin(), s.end(), '_', '-');
    return s;
  };
  auto commands = Commands();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<CLI::App*, kvserve::cli::RunFn> runs;
  for (const auto& c : commands) {
    const std::string summary(c.summary);
    CLI::App* sub = app.add_subcommand(spelled(c.name), summary);
    runs[sub] = c.setup(*sub);
    // `kvserve --help` lists descriptions, so keep the one-line summary there
    // and move a command's longer explanation to the end of its own --help.
    const std::string details = sub->get_description();
    if (details != summary) {
      const std::string footer = sub->get_footer();
      sub->description(summary);
      sub->footer(footer.empty() ? details : details + "\n\n" + footer);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, run] : runs) {
    if (sub->parsed()) return run();
  }
  return 1;  // unreachable: require_subcommand(1)
}
