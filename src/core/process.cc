// Copyright kvserve authors. kvserve/process.h: posix_spawn with an amended environment.
#include "kvserve/process.h"

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cstring>
#include <string_view>

extern char** environ;

namespace kvserve {

Result<std::string> SelfExecutable() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return Status::IOError("cannot find this executable (/proc/self/exe)");
  return std::string(exe, static_cast<size_t>(n));
}

Result<pid_t> SpawnProcess(const std::vector<std::string>& args,
                           const std::vector<std::string>& env, bool stdout_to_null) {
  if (args.empty()) return Status::InvalidArgument("SpawnProcess: no program");
  std::vector<std::string> names;  // "NAME=" of every entry of env
  for (const std::string& e : env) {
    const size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::InvalidArgument("SpawnProcess: environment entry '" + e +
                                     "' is not NAME=value");
    names.push_back(e.substr(0, eq + 1));
  }
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool replaced = false;
    for (const std::string& name : names) replaced = replaced || entry.starts_with(name);
    if (!replaced) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdout_to_null) posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return Status::IOError("cannot start " + args[0] + ": " + std::strerror(rc));
  return pid;
}

}  // namespace kvserve
