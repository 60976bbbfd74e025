// Copyright kvserve authors. Helpers of the serve commands.
#include "serve_cli.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "cli_util.h"
#include "experiments/model_directory.h"
#include "kvserve/serve.h"

namespace kvserve::cli {

Result<std::string> LoadServeSecret(std::string_view command, const std::string& secret_file) {
  if (!secret_file.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(auto bytes, ReadBinaryFile(secret_file));
    std::string s(bytes.begin(), bytes.end());
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.empty()) return Status::InvalidArgument("secret file " + secret_file + " is empty");
    return s;
  }
  if (const char* env = std::getenv("KVSERVE_SECRET"); env != nullptr && *env != '\0')
    return std::string(env);
  Progress(command, "warning: no --secret-file or KVSERVE_SECRET: peers are not authenticated");
  return std::string();
}

Result<std::string> ServeModelDirectory(std::string_view command, const std::string& flag) {
  const std::string fallback =
      (std::filesystem::temp_directory_path() / "kvserve-fallback-model-v1").string();
  std::string note;
  // The shipped models are under the data directory; without one, the
  // fallback model.
  auto data = DataDirectory();
  const std::string models = data.ok() ? lab::DataPath(*data, "models") : std::string("models");
  KVSERVE_ASSIGN_OR_RETURN(std::string dir,
                           lab::ResolveModelDirectory(flag, models, fallback, &note));
  Progress(command, "{}", note);
  return dir;
}

uint64_t RaiseOpenFileLimit(std::string_view command, uint64_t wanted) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  if (r.rlim_cur < wanted)
    Progress(command,
             "warning: open-file limit {} is below {}: under a connection flood the server drops "
             "the longest-waiting unauthenticated peers earlier (raise it with ulimit -n)",
             static_cast<uint64_t>(r.rlim_cur), wanted);
  return r.rlim_cur;
}

namespace {
sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}
}  // namespace

void BlockStopSignals() {
  sigset_t signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

void WaitForStopSignal(double seconds) {
  sigset_t signals = StopSignals();
  if (seconds > 0) {
    timespec ts{static_cast<time_t>(seconds),
                static_cast<long>((seconds - static_cast<time_t>(seconds)) * 1e9)};
    while (sigtimedwait(&signals, nullptr, &ts) < 0 && errno == EINTR) {
    }
  } else {
    int sig = 0;
    sigwait(&signals, &sig);
  }
}

}  // namespace kvserve::cli
