// Copyright kvserve authors. experiments/serving.h.
#include "experiments/serving.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "experiments/model_directory.h"
#include "kvserve/controller.h"

namespace kvserve::lab {

Result<std::string> LoadSecret(const std::string& secret_file, const Progress& progress) {
  if (!secret_file.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(auto bytes, ReadBinaryFile(secret_file));
    std::string s(bytes.begin(), bytes.end());
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.empty()) return Status::InvalidArgument("secret file " + secret_file + " is empty");
    return s;
  }
  if (const char* env = std::getenv("KVSERVE_SECRET"); env != nullptr && *env != '\0')
    return std::string(env);
  Note(progress, "warning: no --secret-file or KVSERVE_SECRET: peers are not authenticated");
  return std::string();
}

Result<ConnectionOptions> PeerConnectionOptions(const PeerFlags& flags, const Progress& progress) {
  ConnectionOptions o;
  KVSERVE_ASSIGN_OR_RETURN(o.secret, LoadSecret(flags.secret_file, progress));
  o.local_id = flags.local_id;
  o.io_timeout_seconds = flags.io_timeout_seconds;
  o.handshake_timeout_seconds = std::min(flags.io_timeout_seconds, 10.0);
  o.max_message_bytes = flags.max_message_bytes;
  o.shape_bytes_per_second = GbpsToBytesPerSecond(flags.shape_gbps);
  return o;
}

uint64_t RaiseOpenFileLimit(uint64_t wanted, const Progress& progress) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  if (r.rlim_cur < wanted)
    Note(progress,
         "warning: open-file limit {} is below {}: under a connection flood the server drops "
         "the longest-waiting unauthenticated peers earlier (raise it with ulimit -n)",
         static_cast<uint64_t>(r.rlim_cur), wanted);
  return r.rlim_cur;
}

Result<std::unique_ptr<Transport>> MakeTransport(const TransportConfig& config,
                                                 const std::string& secret) {
  if (config.kind == "tcp") return NewTcpTransport();
  if (config.kind != "ucx")
    return Status::InvalidArgument("--transport must be tcp or ucx, not '" + config.kind + "'");
  UcxTransportOptions o;
  o.tls = config.ucx_tls;
  o.net_devices = config.ucx_devices;
  o.secret = secret;
  o.window_bytes = static_cast<size_t>(config.ucx_window_kb) << 10;
  o.segment_bytes = std::min(o.segment_bytes, o.window_bytes / 4);
  return NewUcxTransport(o);
}

Result<std::unique_ptr<KvPool>> OpenPoolBackend(const PoolBackendConfig& config) {
  if (config.backend == "memory") return NewMemoryPool({.budget_bytes = config.budget_mb << 20});
  if (config.backend == "redis") {
    RedisPoolOptions o;
    o.host = config.redis_host;
    o.port = config.redis_port;
    o.key_prefix = config.redis_prefix;
    return NewRedisPool(o);
  }
  if (config.backend == "redis-cluster") {
    RedisClusterPoolOptions o;
    o.seeds = SplitList(config.redis_nodes);
    o.key_prefix = config.redis_prefix;
    o.max_piece_bytes = config.piece_mb << 20;
    return NewRedisClusterPool(o);
  }
  return Status::InvalidArgument("unknown pool backend '" + config.backend +
                                 "' (memory | redis | redis-cluster)");
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

Status WriteAddressFile(const std::string& path, const std::string& address) {
  return WriteTextFile(path, address + "\n");
}

Result<std::string> PrefillTablePath(const std::string& flag, const std::string& model_dir,
                                     const std::string& profiles_dir) {
  if (!flag.empty()) return flag;
  std::string path = DefaultProfileTablePath(model_dir, profiles_dir);
  if (!path.empty()) return path;
  const std::string want = profiles_dir + "/" +
                           std::filesystem::path(model_dir).lexically_normal().filename().string() +
                           "-unified.json";
  return Status::NotFound("no measured profile table for " + model_dir + " (no " + want +
                          "): pass --table FILE (configs/profile_table.example.json holds "
                          "hand-written, unmeasured numbers)");
}

Result<LatencyModel> ParseWorkerLatencyModel(const std::string& name) {
  if (name == "streamed") return LatencyModel{LatencyModelKind::kStreamed, 0};
  if (name == "serial") return LatencyModel{LatencyModelKind::kSerial, 1};
  return Status::InvalidArgument("--latency-model must be streamed or serial");
}

Result<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  KVSERVE_ASSIGN_OR_RETURN(auto bytes, ReadBinaryFile(model_dir + "/config.json"));
  return ParseModelConfig(std::string(bytes.begin(), bytes.end()));
}

Result<TextPrompt> LoadTextPrompt(const std::string& model_dir, const std::string& text) {
  KVSERVE_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  TextPrompt p;
  KVSERVE_ASSIGN_OR_RETURN(p.tokenizer, Tokenizer::Load(model_dir));
  KVSERVE_ASSIGN_OR_RETURN(p.ids, p.tokenizer->EncodePrompt(text, config.bos_token_id));
  if (p.ids.empty()) return Status::InvalidArgument("the prompt has no tokens");
  for (int32_t id : p.ids) {
    if (id >= config.vocab_size)
      return Status::InvalidArgument("prompt token " + std::to_string(id) +
                                     " is outside the model's vocabulary");
  }
  return p;
}

}  // namespace kvserve::lab
