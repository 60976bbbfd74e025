// Copyright kvserve authors. Test fixture of the connector tests: a pair of
// authenticated connections over each transport the transport tests use
// (in-process loopback, TCP, UCX tcp, UCX shared memory).
#ifndef KVSERVE_CONNECTOR_CONNECTOR_TEST_UTIL_H_
#define KVSERVE_CONNECTOR_CONNECTOR_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "kvserve/transport.h"
#include "transport/transport_test_util.h"

namespace kvserve::connectortest {

using transporttest::Kind;

// A connected pair over a transport of `kind` (64 KiB loopback pipes or UCX
// receive window, so that back-pressure is exercised); short io timeouts so
// that a transfer that never ends fails the test instead of hanging it.
struct Pair {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Connection> sender, receiver;
};

inline std::unique_ptr<Pair> MakePair(Kind kind = Kind::kLoopback) {
  auto pair = std::make_unique<Pair>();
  pair->transport = transporttest::MakeTransport(kind, 64 * 1024);
  if (pair->transport == nullptr) return nullptr;
  ConnectionOptions o;
  o.secret = "stream-secret";
  o.io_timeout_seconds = 3;
  o.handshake_timeout_seconds = 3;
  auto listener = pair->transport->Listen(transporttest::ListenAddress(kind));
  EXPECT_TRUE(listener.ok()) << listener.status().ToString();
  if (!listener.ok()) return nullptr;
  std::thread accept([&] {
    auto c = Connection::Accept(**listener, o, 3);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (c.ok()) pair->receiver = std::move(*c);
  });
  auto c = Connection::Dial(*pair->transport, (*listener)->Address(), o);
  accept.join();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok() || !pair->receiver) return nullptr;
  pair->sender = std::move(*c);
  return pair;
}

}  // namespace kvserve::connectortest

#endif  // KVSERVE_CONNECTOR_CONNECTOR_TEST_UTIL_H_
