// Copyright kvserve authors. The shared --transport flags.
#include "transport_cli.h"

namespace kvserve::cli {

void AddTransportFlags(CLI::App* app, TransportFlags* flags) {
  app->add_option("--transport", flags->kind,
                  "tcp (our asio TCP) or ucx (UCX active messages; docs/transport.md §UCX)")
      ->check(CLI::IsMember({"tcp", "ucx"}))
      ->capture_default_str();
  app->add_option("--ucx-tls", flags->ucx_tls,
                  "UCX transports (UCX_TLS syntax, e.g. tcp | sm,self | rc,dc,cuda_ipc); "
                  "default: $UCX_TLS, else all UCX finds");
  app->add_option("--ucx-devices", flags->ucx_devices,
                  "UCX network devices (UCX_NET_DEVICES syntax, e.g. eth0)");
  app->add_option("--ucx-window-kb", flags->ucx_window_kb,
                  "UCX receive window per stream, KiB (back-pressure beyond it)")
      ->check(CLI::Range(uint64_t{64}, uint64_t{1} << 30))
      ->capture_default_str();
}

void AddConnectionFlags(CLI::App* app, TransportFlags* flags, std::string* secret_file,
                        double* timeout_seconds) {
  AddTransportFlags(app, flags);
  app->add_option("--secret-file", *secret_file,
                  "File holding the shared secret (else $KVSERVE_SECRET)");
  app->add_option("--timeout", *timeout_seconds, "I/O idle timeout, seconds")
      ->capture_default_str();
}

}  // namespace kvserve::cli
