// Copyright kvserve authors. Waiting on file descriptors and clocks with
// timeouts. Internal to src/transport.
#ifndef KVSERVE_TRANSPORT_POLL_WAIT_H_
#define KVSERVE_TRANSPORT_POLL_WAIT_H_

#include "kvserve/status.h"

namespace kvserve::transport {

// Waits until `fd` is ready for `events` (POLLIN/POLLOUT) or reports
// POLLHUP/POLLERR (returned as OK: the following I/O call reports the
// error). Timeout after `timeout_seconds` (< 0: forever). EINTR is retried.
Status WaitFd(int fd, short events, double timeout_seconds);

// Sleeps for `seconds` (no-op when <= 0).
void SleepSeconds(double seconds);

}  // namespace kvserve::transport

#endif  // KVSERVE_TRANSPORT_POLL_WAIT_H_
