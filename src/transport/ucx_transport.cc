// Copyright kvserve authors. The UCX transport: TCP bootstrap (mutual
// HMAC-SHA256 proof of the secret, then the UCX worker addresses and stream
// ids, MACed), listener with bootstrap threads, and NewUcxTransport
// (docs/transport.md §UCX has the byte layout).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/transport.h"
#include "transport/auth.h"
#include "transport/ucx_engine.h"
#include "transport/ucx_stream.h"
#include "transport/wire.h"

namespace kvserve {
namespace {

using transport::ucx::Engine;
using transport::ucx::StreamId;
using transport::ucx::StreamState;
using transport::ucx::UcxStream;

constexpr char kBootMagic[4] = {'K', 'V', 'S', 'U'};
constexpr uint8_t kBootVersion = 1;
constexpr size_t kHelloBytes = 8 + transport::kNonceBytes;                         // 40
constexpr size_t kChallengeBytes = 8 + transport::kNonceBytes + transport::kMacBytes;  // 72
constexpr size_t kOfferFixedBytes = transport::kMacBytes + 16 + 8 + 4;             // 60
constexpr size_t kAcceptFixedBytes = 1 + 16 + 8 + 4;                               // 29
// UCX worker addresses are a few hundred bytes per device; refuse more.
constexpr uint32_t kMaxWorkerAddressBytes = 16 * 1024;
constexpr std::string_view kServerLabel = "kvserve-ucx-v1 server";
constexpr std::string_view kClientLabel = "kvserve-ucx-v1 client";
constexpr std::string_view kAcceptLabel = "kvserve-ucx-v1 accept";

Status ReadExact(Stream& stream, std::span<uint8_t> out, double deadline, const std::string& who) {
  size_t have = 0;
  while (have < out.size()) {
    const double left = deadline - MonotonicSeconds();
    if (left <= 0) return Status::Timeout("UCX bootstrap with " + who + ": no answer in time");
    auto n = stream.Read(out.subspan(have), left);
    if (!n.ok()) return n.status().WithContext("UCX bootstrap with " + who);
    have += *n;
  }
  return Status::Ok();
}

Status WriteAll(Stream& stream, std::span<const uint8_t> bytes, double deadline,
                const std::string& who) {
  return stream.Write(bytes, std::max(0.0, deadline - MonotonicSeconds()))
      .WithContext("UCX bootstrap with " + who);
}

std::vector<uint8_t> Concat(std::initializer_list<std::span<const uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (auto p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Our half of a stream's parameters: id, window, worker address.
std::vector<uint8_t> Parameters(const StreamId& id, uint64_t window,
                                const std::vector<uint8_t>& address) {
  std::vector<uint8_t> out(id.begin(), id.end());
  uint8_t fixed[12];
  transport::PutU64(fixed, window);
  transport::PutU32(fixed + 8, static_cast<uint32_t>(address.size()));
  out.insert(out.end(), fixed, fixed + 12);
  out.insert(out.end(), address.begin(), address.end());
  return out;
}

// Reads the peer's parameters (id, window, worker address) into `state` /
// `address`; `raw` receives the bytes as they were on the wire.
Status ReadParameters(Stream& stream, double deadline, const std::string& who, StreamState* state,
                      std::vector<uint8_t>* address, std::vector<uint8_t>* raw) {
  uint8_t fixed[16 + 12];
  KVSERVE_RETURN_IF_ERROR(ReadExact(stream, fixed, deadline, who));
  std::memcpy(state->peer_id.data(), fixed, 16);
  state->peer_window = transport::GetU64(fixed + 16);
  const uint32_t length = transport::GetU32(fixed + 24);
  if (state->peer_window < 1 || length == 0 || length > kMaxWorkerAddressBytes)
    return Status::Corruption("UCX bootstrap with " + who + ": bad window or address length");
  address->resize(length);
  KVSERVE_RETURN_IF_ERROR(ReadExact(stream, *address, deadline, who));
  raw->assign(fixed, fixed + sizeof(fixed));
  raw->insert(raw->end(), address->begin(), address->end());
  return Status::Ok();
}

std::shared_ptr<StreamState> NewState(const UcxTransportOptions& o, std::shared_ptr<Stream> control,
                                      Status* status) {
  auto state = std::make_shared<StreamState>();
  state->remote = control->RemoteAddress();
  state->window = o.window_bytes;
  state->segment_bytes = o.segment_bytes;
  state->write_behind_limit = o.write_behind_bytes;
  state->control = std::move(control);
  *status = transport::ucx::RandomStreamId(&state->local_id);
  return state;
}

// Client side: HELLO, CHALLENGE, OFFER, ACCEPT.
Result<std::unique_ptr<Stream>> ClientBootstrap(const std::shared_ptr<Engine>& engine,
                                                const UcxTransportOptions& o,
                                                std::unique_ptr<Stream> control) {
  const std::string who = control->RemoteAddress();
  const double deadline = MonotonicSeconds() + o.bootstrap_timeout_seconds;
  transport::Nonce nc;
  KVSERVE_RETURN_IF_ERROR(transport::RandomNonce(&nc));
  uint8_t hello[kHelloBytes] = {};
  std::memcpy(hello, kBootMagic, 4);
  hello[4] = kBootVersion;
  std::memcpy(hello + 8, nc.data(), nc.size());
  KVSERVE_RETURN_IF_ERROR(WriteAll(*control, hello, deadline, who));
  uint8_t challenge[kChallengeBytes];
  KVSERVE_RETURN_IF_ERROR(ReadExact(*control, challenge, deadline, who));
  if (!std::equal(kBootMagic, kBootMagic + 4, challenge))
    return Status::Corruption("UCX bootstrap with " + who + ": not a kvserve UCX listener");
  if (challenge[5] != 0)
    return Status(static_cast<StatusCode>(challenge[5]),
                  "UCX bootstrap with " + who + ": refused by the server");
  std::span<const uint8_t> ns(challenge + 8, transport::kNonceBytes);
  const std::vector<uint8_t> nonces = Concat({nc, ns});
  if (!transport::MacEquals(std::span<const uint8_t>(challenge + 8 + transport::kNonceBytes,
                                                     transport::kMacBytes),
                            transport::ComputeMac(o.secret, kServerLabel, nonces)))
    return Status::PermissionDenied("UCX server " + who + " did not prove the shared secret");

  Status s;
  auto state = NewState(o, std::move(control), &s);
  KVSERVE_RETURN_IF_ERROR(s);
  // Registered before the offer: the server may send as soon as it accepts.
  KVSERVE_RETURN_IF_ERROR(engine->Register(state));
  auto fail = [&](Status why) {
    state->control->Close();
    engine->Close(state, /*force=*/true);
    return why;
  };
  const std::vector<uint8_t> mine = Parameters(state->local_id, o.window_bytes,
                                               engine->worker_address());
  const auto proof = transport::ComputeMac(o.secret, kClientLabel, Concat({nonces, mine}));
  const std::vector<uint8_t> offer = Concat({proof, mine});
  s = WriteAll(*state->control, offer, deadline, who);
  if (!s.ok()) return fail(s);
  uint8_t verdict = 0;
  s = ReadExact(*state->control, {&verdict, 1}, deadline, who);
  if (!s.ok()) return fail(s);
  if (verdict != 0) {
    const auto code = static_cast<StatusCode>(verdict);
    return fail(Status(code, code == StatusCode::kPermissionDenied
                                 ? "UCX server " + who + " refused our proof of the secret"
                                 : "UCX server " + who + " refused the stream"));
  }
  std::vector<uint8_t> address, theirs;
  s = ReadParameters(*state->control, deadline, who, state.get(), &address, &theirs);
  if (!s.ok()) return fail(s);
  uint8_t tag[transport::kMacBytes];
  s = ReadExact(*state->control, tag, deadline, who);
  if (!s.ok()) return fail(s);
  const std::vector<uint8_t> ok_byte = {0};
  if (!transport::MacEquals(tag, transport::ComputeMac(o.secret, kAcceptLabel,
                                                       Concat({nonces, mine, ok_byte, theirs}))))
    return fail(Status::PermissionDenied("UCX server " + who +
                                         " sent stream parameters without a valid MAC"));
  s = engine->Open(state, address);
  if (!s.ok()) return fail(s);
  return std::unique_ptr<Stream>(new UcxStream(engine, state));
}

// Server side of one bootstrap; the stream, or why it failed.
Result<std::unique_ptr<Stream>> ServerBootstrap(const std::shared_ptr<Engine>& engine,
                                                const UcxTransportOptions& o,
                                                std::shared_ptr<Stream> control) {
  const std::string who = control->RemoteAddress();
  const double deadline = MonotonicSeconds() + o.bootstrap_timeout_seconds;
  uint8_t hello[kHelloBytes];
  KVSERVE_RETURN_IF_ERROR(ReadExact(*control, hello, deadline, who));
  uint8_t challenge[kChallengeBytes] = {};
  std::memcpy(challenge, kBootMagic, 4);
  challenge[4] = kBootVersion;
  if (!std::equal(kBootMagic, kBootMagic + 4, hello))
    return Status::Corruption("UCX bootstrap from " + who + ": bad magic");
  if (hello[4] != kBootVersion) {
    challenge[5] = static_cast<uint8_t>(StatusCode::kNotSupported);
    (void)WriteAll(*control, challenge, deadline, who);
    return Status::NotSupported("UCX bootstrap from " + who + ": version " +
                                std::to_string(hello[4]));
  }
  transport::Nonce ns;
  KVSERVE_RETURN_IF_ERROR(transport::RandomNonce(&ns));
  const std::vector<uint8_t> nonces =
      Concat({std::span<const uint8_t>(hello + 8, transport::kNonceBytes), ns});
  const auto server_proof = transport::ComputeMac(o.secret, kServerLabel, nonces);
  std::memcpy(challenge + 8, ns.data(), ns.size());
  std::memcpy(challenge + 8 + ns.size(), server_proof.data(), server_proof.size());
  KVSERVE_RETURN_IF_ERROR(WriteAll(*control, challenge, deadline, who));

  uint8_t proof[transport::kMacBytes];
  KVSERVE_RETURN_IF_ERROR(ReadExact(*control, proof, deadline, who));
  Status s;
  auto state = NewState(o, std::move(control), &s);
  KVSERVE_RETURN_IF_ERROR(s);
  std::vector<uint8_t> address, theirs;
  KVSERVE_RETURN_IF_ERROR(ReadParameters(*state->control, deadline, who, state.get(), &address,
                                         &theirs));
  if (!transport::MacEquals(proof,
                            transport::ComputeMac(o.secret, kClientLabel, Concat({nonces, theirs})))) {
    const uint8_t denied = static_cast<uint8_t>(StatusCode::kPermissionDenied);
    (void)WriteAll(*state->control, {&denied, 1}, deadline, who);
    return Status::PermissionDenied("UCX client " + who + " failed authentication");
  }
  KVSERVE_RETURN_IF_ERROR(engine->Register(state));
  s = engine->Open(state, address);
  if (!s.ok()) {
    const uint8_t refused = static_cast<uint8_t>(StatusCode::kUnavailable);
    (void)WriteAll(*state->control, {&refused, 1}, deadline, who);
    state->control->Close();
    engine->Close(state, /*force=*/true);
    return s;
  }
  const std::vector<uint8_t> ok_byte = {0};
  const std::vector<uint8_t> mine = Parameters(state->local_id, o.window_bytes,
                                               engine->worker_address());
  const auto tag = transport::ComputeMac(o.secret, kAcceptLabel,
                                         Concat({nonces, theirs, ok_byte, mine}));
  s = WriteAll(*state->control, Concat({ok_byte, mine, tag}), deadline, who);
  if (!s.ok()) {
    state->control->Close();
    engine->Close(state, /*force=*/true);
    return s;
  }
  return std::unique_ptr<Stream>(new UcxStream(engine, state));
}

// Accepts TCP connections on a thread and bootstraps each on its own
// (bounded by the backlog), queueing the streams for Accept.
class UcxListener final : public Listener {
 public:
  UcxListener(std::shared_ptr<Engine> engine, UcxTransportOptions options,
              std::unique_ptr<Listener> tcp)
      : engine_(std::move(engine)), options_(std::move(options)), tcp_(std::move(tcp)) {
    address_ = tcp_->Address();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~UcxListener() override { Close(); }

  Result<std::unique_ptr<Stream>> Accept(double timeout_seconds) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return closed_ || !ready_.empty(); };
    if (timeout_seconds < 0) {
      cv_.wait(lock, ready);
    } else if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), ready)) {
      return Status::Timeout("no connection within " + std::to_string(timeout_seconds) + " s");
    }
    if (closed_) return Status::Unavailable("listener closed");
    auto stream = std::move(ready_.front());
    ready_.pop_front();
    return stream;
  }

  std::string Address() const override { return address_; }

  void Close() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      for (auto& b : bootstraps_)
        if (b.slot->control) b.slot->control->Close();
      cv_.notify_all();
    }
    tcp_->Close();
    if (accept_thread_.joinable()) accept_thread_.join();
    std::list<Bootstrap> pending;
    std::deque<std::unique_ptr<Stream>> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending.swap(bootstraps_);
      ready.swap(ready_);
    }
    for (auto& b : pending) b.thread.join();
    ready.clear();  // closes them
  }

 private:
  // One bootstrap in progress. `control` (guarded by mu_) is dropped when it
  // ends, so that Close interrupts bootstraps, never finished streams.
  struct Slot {
    std::shared_ptr<Stream> control;
    bool done = false;
  };
  struct Bootstrap {
    std::thread thread;
    std::shared_ptr<Slot> slot;
  };

  void AcceptLoop() {
    for (;;) {
      auto control = tcp_->Accept(0.2);
      Reap();
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      if (!control.ok()) continue;
      if (bootstraps_.size() + ready_.size() >= options_.backlog) {
        (*control)->Close();  // over the backlog: refused
        continue;
      }
      Bootstrap b;
      b.slot = std::make_shared<Slot>();
      b.slot->control = std::shared_ptr<Stream>(std::move(*control));
      b.thread = std::thread([this, control = b.slot->control, slot = b.slot]() mutable {
        auto stream = ServerBootstrap(engine_, options_, std::move(control));
        std::lock_guard<std::mutex> lock(mu_);
        if (stream.ok() && !closed_) {
          ready_.push_back(std::move(*stream));
          cv_.notify_all();
        }
        slot->control.reset();
        slot->done = true;
      });
      bootstraps_.push_back(std::move(b));
    }
  }

  void Reap() {
    std::list<Bootstrap> finished;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = bootstraps_.begin(); it != bootstraps_.end();) {
        auto next = std::next(it);
        if (it->slot->done) finished.splice(finished.end(), bootstraps_, it);
        it = next;
      }
    }
    for (auto& b : finished) b.thread.join();
  }

  std::shared_ptr<Engine> engine_;
  UcxTransportOptions options_;
  std::unique_ptr<Listener> tcp_;
  std::string address_;
  std::thread accept_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<Bootstrap> bootstraps_;
  std::deque<std::unique_ptr<Stream>> ready_;
  bool closed_ = false;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(std::shared_ptr<Engine> engine, UcxTransportOptions options)
      : engine_(std::move(engine)), options_(std::move(options)), tcp_(NewTcpTransport()) {}

  Result<std::unique_ptr<Stream>> Connect(const std::string& address,
                                          double timeout_seconds) override {
    KVSERVE_ASSIGN_OR_RETURN(auto control, tcp_->Connect(address, timeout_seconds));
    return ClientBootstrap(engine_, options_, std::move(control));
  }

  Result<std::unique_ptr<Listener>> Listen(const std::string& address) override {
    KVSERVE_ASSIGN_OR_RETURN(auto tcp, tcp_->Listen(address));
    return std::unique_ptr<Listener>(new UcxListener(engine_, options_, std::move(tcp)));
  }

 private:
  std::shared_ptr<Engine> engine_;
  UcxTransportOptions options_;
  std::unique_ptr<Transport> tcp_;
};

}  // namespace

Result<std::unique_ptr<Transport>> NewUcxTransport(UcxTransportOptions options) {
  if (options.window_bytes < 64 * 1024)
    return Status::InvalidArgument("UCX window_bytes must be at least 64 KiB");
  if (options.segment_bytes < 4096 || options.segment_bytes > options.window_bytes)
    return Status::InvalidArgument("UCX segment_bytes must be in [4 KiB, window_bytes]");
  if (!(options.bootstrap_timeout_seconds > 0))
    return Status::InvalidArgument("UCX bootstrap_timeout_seconds must be positive");
  if (options.backlog < 1) return Status::InvalidArgument("UCX backlog must be >= 1");
  KVSERVE_ASSIGN_OR_RETURN(auto engine,
                           Engine::Create({.tls = options.tls, .net_devices = options.net_devices}));
  return std::unique_ptr<Transport>(new UcxTransport(std::move(engine), std::move(options)));
}

}  // namespace kvserve
