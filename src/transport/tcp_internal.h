// Copyright kvserve authors. What other transports need from the TCP one.
// Internal to src/transport.
#ifndef KVSERVE_TRANSPORT_TCP_INTERNAL_H_
#define KVSERVE_TRANSPORT_TCP_INTERNAL_H_

#include "kvserve/transport.h"

namespace kvserve::transport {

// The socket of a stream made by NewTcpTransport (for poll/epoll: the UCX
// transport watches its control connections this way), or -1 for any other
// stream. The descriptor stays owned by the stream.
int TcpStreamFd(const Stream& stream);

}  // namespace kvserve::transport

#endif  // KVSERVE_TRANSPORT_TCP_INTERNAL_H_
