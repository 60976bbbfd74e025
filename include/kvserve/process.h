// Copyright kvserve authors. Starting a child process (a worker process of
// the tools and the e2e benchmark, a test's child role) with posix_spawn:
// this process's environment with some variables set, optionally stdout to
// /dev/null.
#ifndef KVSERVE_PROCESS_H_
#define KVSERVE_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "kvserve/status.h"

namespace kvserve {

// The absolute path of this process's executable (/proc/self/exe).
// IOError when it cannot be read.
[[nodiscard]] Result<std::string> SelfExecutable();

// Starts the program at the path args[0] with arguments `args` (args[0]
// included, as argv[0]). Its environment is this process's, with each
// "NAME=value" of `env` set (replacing a variable of the same name). With
// `stdout_to_null` its standard output goes to /dev/null; stdin and stderr
// are inherited. Returns the child's pid; the caller reaps it (waitpid).
// InvalidArgument for empty `args` or an `env` entry without '=', IOError
// when the program cannot be started.
[[nodiscard]] Result<pid_t> SpawnProcess(const std::vector<std::string>& args,
                                         const std::vector<std::string>& env, bool stdout_to_null);

}  // namespace kvserve

#endif  // KVSERVE_PROCESS_H_
