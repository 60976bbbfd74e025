// Copyright kvserve authors. The --transport flags every networked command
// shares (tcp | ucx, the UCX transports and devices) and the Transport they
// select (lab::MakeTransport).
#ifndef KVSERVE_TOOLS_KVSERVE_TRANSPORT_CLI_H_
#define KVSERVE_TOOLS_KVSERVE_TRANSPORT_CLI_H_

#include <CLI/CLI.hpp>
#include <string>

#include "experiments/serving.h"

namespace kvserve::cli {

using TransportFlags = lab::TransportConfig;
using lab::MakeTransport;

// Adds --transport, --ucx-tls, --ucx-devices and --ucx-window-kb to `app`.
void AddTransportFlags(CLI::App* app, TransportFlags* flags);

// Adds the transport flags plus --secret-file (the shared secret; else
// $KVSERVE_SECRET) and --timeout (I/O idle timeout, seconds; its current
// value is shown as the default) to `app`.
void AddConnectionFlags(CLI::App* app, TransportFlags* flags, std::string* secret_file,
                        double* timeout_seconds);

}  // namespace kvserve::cli

#endif  // KVSERVE_TOOLS_KVSERVE_TRANSPORT_CLI_H_
