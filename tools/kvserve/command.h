// Copyright kvserve authors. The sub-command registry of the kvserve CLI.
//
// Each sub-command lives in its own file tools/kvserve/cmd_<name>.cc (built
// by a glob) and registers itself with one line at namespace scope:
//
//   KVSERVE_COMMAND(compress, "Compress a KV file into a frame file", SetupCompress);
//
// where SetupCompress(CLI::App& sub) declares the sub-command's options on
// `sub` and returns the function that runs it after parsing (returning the
// process exit status). main.cc needs no change when a command is added.
#ifndef KVSERVE_TOOLS_KVSERVE_COMMAND_H_
#define KVSERVE_TOOLS_KVSERVE_COMMAND_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::cli {

using RunFn = std::function<int()>;
using SetupFn = RunFn (*)(CLI::App& sub);

struct CommandSpec {
  std::string_view name;     // "compress"
  std::string_view summary;  // one line for `kvserve --help`
  SetupFn setup;
};

// All registered commands (registration order is unspecified; main sorts).
std::vector<CommandSpec>& Commands();

struct CommandRegistrar {
  explicit CommandRegistrar(CommandSpec spec) { Commands().push_back(spec); }
};

// An option a command no longer has (e.g. --svg, now a JSON the plots are
// drawn from): kept so that using it fails with `hint`, saying what to do
// instead, rather than with CLI11's "not expected". Hidden from --help.
inline void AddMovedOption(CLI::App& sub, const std::string& name, const std::string& hint) {
  sub.add_option_function<std::string>(
         name, [name, hint](const std::string&) { throw CLI::ValidationError(name, hint); })
      ->group("");
}

}  // namespace kvserve::cli

#define KVSERVE_COMMAND(name, summary, setup)                                      \
  static const ::kvserve::cli::CommandRegistrar kvserve_command_registrar_##name { \
    ::kvserve::cli::CommandSpec { #name, summary, setup }                          \
  }

#endif  // KVSERVE_TOOLS_KVSERVE_COMMAND_H_
