// Copyright kvserve authors. The --transport flags every networked command
// shares (tcp | ucx, the UCX transports and devices) and the Transport they
// select.
#ifndef KVSERVE_TOOLS_KVSERVE_TRANSPORT_CLI_H_
#define KVSERVE_TOOLS_KVSERVE_TRANSPORT_CLI_H_

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "kvserve/status.h"
#include "kvserve/transport.h"

namespace kvserve::cli {

struct TransportFlags {
  std::string kind = "tcp";  // tcp | ucx
  std::string ucx_tls;       // UCX_TLS syntax; empty = UCX's default / $UCX_TLS
  std::string ucx_devices;   // UCX_NET_DEVICES syntax
  uint64_t ucx_window_kb = UcxTransportOptions{}.window_bytes >> 10;
};

// Adds --transport, --ucx-tls, --ucx-devices and --ucx-window-kb to `app`.
void AddTransportFlags(CLI::App* app, TransportFlags* flags);

// Adds the transport flags plus --secret-file (the shared secret; else
// $KVSERVE_SECRET) and --timeout (I/O idle timeout, seconds; its current
// value is shown as the default) to `app`.
void AddConnectionFlags(CLI::App* app, TransportFlags* flags, std::string* secret_file,
                        double* timeout_seconds);

// The transport the flags name; `secret` keys the UCX bootstrap (the same
// secret the connections prove). InvalidArgument for an unknown kind.
Result<std::unique_ptr<Transport>> MakeTransport(const TransportFlags& flags,
                                                 const std::string& secret);

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_TRANSPORT_CLI_H_
