// Copyright kvserve authors. The transports every transport, pool and serve
// test runs over: in-process loopback, our TCP, and UCX over its tcp
// transport and over shared memory (sm: posix/sysv/cma, plus self inside
// one worker). Header-only, for tests.
#ifndef KVSERVE_TRANSPORT_TRANSPORT_TEST_UTIL_H_
#define KVSERVE_TRANSPORT_TRANSPORT_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "kvserve/process.h"
#include "kvserve/transport.h"

namespace kvserve::transporttest {

enum class Kind { kLoopback, kTcp, kUcxTcp, kUcxSm };

inline bool IsUcx(Kind kind) { return kind == Kind::kUcxTcp || kind == Kind::kUcxSm; }

// The secret UCX test transports prove to each other in the bootstrap.
inline constexpr const char* kUcxTestSecret = "ucx-bootstrap-test-secret";

inline UcxTransportOptions UcxOptions(Kind kind) {
  UcxTransportOptions o;
  o.tls = kind == Kind::kUcxTcp ? "tcp" : "sm,self";
  o.secret = kUcxTestSecret;
  return o;
}

// A transport of `kind`; `buffer_bytes` is the loopback pipe capacity or the
// UCX receive window.
inline std::unique_ptr<Transport> MakeTransport(Kind kind, size_t buffer_bytes = 1 << 20) {
  switch (kind) {
    case Kind::kTcp:
      return NewTcpTransport();
    case Kind::kUcxTcp:
    case Kind::kUcxSm: {
      UcxTransportOptions o = UcxOptions(kind);
      o.window_bytes = std::max<size_t>(buffer_bytes, 64 * 1024);
      o.segment_bytes = std::min(o.segment_bytes, o.window_bytes / 4);
      auto t = NewUcxTransport(o);
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      return t.ok() ? std::move(*t) : nullptr;
    }
    case Kind::kLoopback:
      break;
  }
  LoopbackTransportOptions o;
  o.buffer_bytes = buffer_bytes;
  return NewLoopbackTransport(o);
}

inline std::string ListenAddress(Kind kind) {
  return kind == Kind::kLoopback ? "server" : "127.0.0.1:0";
}

inline std::vector<Kind> AllKinds() {
  return {Kind::kLoopback, Kind::kTcp, Kind::kUcxTcp, Kind::kUcxSm};
}
// The kinds that move bytes between processes (serve and pool tests).
inline std::vector<Kind> NetworkKinds() { return {Kind::kTcp, Kind::kUcxTcp, Kind::kUcxSm}; }

inline std::string KindName(const ::testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kLoopback:
      return "Loopback";
    case Kind::kTcp:
      return "Tcp";
    case Kind::kUcxTcp:
      return "UcxTcp";
    case Kind::kUcxSm:
      return "UcxSm";
  }
  return "Unknown";
}

// Starts this test binary again as a child running only the tests matching
// `gtest_filter` (a child role), with `env` added to this process's
// environment (replacing variables of the same names) and stdout to
// /dev/null. The child's pid, or -1.
inline pid_t SpawnSelf(const std::string& gtest_filter, std::vector<std::string> env) {
  auto exe = SelfExecutable();
  if (!exe.ok()) return -1;
  auto pid = SpawnProcess({*exe, "--gtest_filter=" + gtest_filter}, env, /*stdout_to_null=*/true);
  return pid.ok() ? *pid : -1;
}

}  // namespace kvserve::transporttest

#endif  // KVSERVE_TRANSPORT_TRANSPORT_TEST_UTIL_H_
