// Copyright kvserve authors.
#include "transport/poll_wait.h"

#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "kvserve/transport.h"

namespace kvserve::transport {

Status WaitFd(int fd, short events, double timeout_seconds) {
  const double deadline = timeout_seconds < 0 ? -1 : MonotonicSeconds() + timeout_seconds;
  for (;;) {
    int wait_ms = -1;
    if (deadline >= 0) {
      double left = deadline - MonotonicSeconds();
      if (left < 0) left = 0;
      wait_ms = static_cast<int>(std::ceil(std::min(left, 3600.0) * 1000.0));
    }
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, wait_ms);
    if (rc > 0) return Status::Ok();
    if (rc < 0 && errno != EINTR)
      return Status::IOError(std::string("poll: ") + std::strerror(errno));
    if (rc == 0 && deadline >= 0 && MonotonicSeconds() >= deadline)
      return Status::Timeout("no progress within " + std::to_string(timeout_seconds) + " s");
  }
}

void SleepSeconds(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}


}  // namespace kvserve::transport

namespace kvserve {
double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace kvserve
