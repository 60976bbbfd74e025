// Copyright kvserve authors. The UCX engine: a UCP worker owned by one
// thread, active-message streams with credit flow control, endpoint and
// control-connection failure handling (ucx_engine.h has the protocol).
#include "transport/ucx_engine.h"

#include <openssl/rand.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <cstring>
#include <deque>
#include <future>
#include <list>
#include <unordered_set>
#include <utility>

#include "transport/tcp_internal.h"
#include "transport/wire.h"

namespace kvserve::transport::ucx {

namespace {

constexpr unsigned kAmId = 0x4B;
// A flush during which no send completed for this long (the peer is gone
// or not progressing) is abandoned and the endpoint closed by force.
constexpr double kFlushSeconds = 2.0;
constexpr char kCloseMagic[4] = {'K', 'V', 'S', 'C'};
constexpr size_t kCloseBytes = 12;

std::string UcsError(ucs_status_t status) { return ucs_status_string(status); }

void EncodeHeader(uint8_t kind, const StreamId& id, uint64_t value, uint8_t out[kAmHeaderBytes]) {
  std::memset(out, 0, kAmHeaderBytes);
  out[0] = kind;
  std::memcpy(out + 8, id.data(), id.size());
  PutU64(out + 24, value);
}

// A send in flight: the header must stay valid until UCP completes it.
struct SendRequest {
  class Engine::Impl* engine = nullptr;  // set while UCP holds the request
  std::shared_ptr<StreamState> state;
  std::shared_ptr<WriteOp> op;  // the Write waiting for it (null for CREDIT)
  bool data = false;      // DATA (counts towards send_completed), else CREDIT
  size_t length = 0;
  uint8_t header[kAmHeaderBytes];
};

// A rendezvous receive in flight into the segment at `offset`.
struct RecvRequest {
  std::shared_ptr<StreamState> state;
  uint64_t offset = 0;
};

// Argument of an endpoint's error handler; freed when the endpoint's close
// completes.
struct EpContext {
  class Engine::Impl* engine = nullptr;
  std::weak_ptr<StreamState> state;
  ucp_ep_h ep = nullptr;
};

struct FlushRequest {
  class Engine::Impl* engine = nullptr;
  std::shared_ptr<StreamState> state;
};

void SetFailure(StreamState& s, Status status) {
  if (s.failure.ok()) s.failure = std::move(status);
  s.Notify();
}

}  // namespace

class Engine::Impl {
 public:
  explicit Impl(Options options) : options_(std::move(options)) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      stop_ = true;
    }
    Wake();
    if (thread_.joinable()) thread_.join();
    if (event_fd_ >= 0) ::close(event_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
  }

  Status Start(std::vector<uint8_t>* address) {
    event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (event_fd_ < 0 || epoll_fd_ < 0) return Status::IOError("ucx engine: eventfd/epoll");
    AddFd(event_fd_);
    std::promise<Status> started;
    auto future = started.get_future();
    thread_ = std::thread([this, &started] { Run(&started); });
    Status s = future.get();
    if (s.ok()) *address = address_;
    return s;
  }

  // Runs `fn` on the engine thread.
  void Post(std::function<void()> fn) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      queue_.push_back(std::move(fn));
      wake = sleeping_;
    }
    if (wake) Wake();
  }

  // Posts `fn` and waits for its Status.
  Status Call(std::function<Status()> fn) {
    std::promise<Status> done;
    auto future = done.get_future();
    Post([&] { done.set_value(fn()); });
    return future.get();
  }

  // --- engine thread ------------------------------------------------------

  bool peer_error_mode() const { return peer_error_mode_.load(); }

  void RegisterOnThread(const std::shared_ptr<StreamState>& state) {
    streams_[state->local_id] = state;
  }

  Status OpenOnThread(const std::shared_ptr<StreamState>& state, std::vector<uint8_t> peer) {
    auto ctx = std::make_unique<EpContext>();
    ctx->engine = this;
    ctx->state = state;
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    // Peer-failure handling where the transports support it (tcp, rc, dc,
    // ud); UCX 1.13's shared-memory transports do not, and then the control
    // connection alone detects a dead peer.
    p.err_mode = peer_error_mode_ ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    p.err_handler.cb = &Impl::OnEpError;
    p.err_handler.arg = ctx.get();
    ucp_ep_h ep = nullptr;
    ucs_status_t st = ucp_ep_create(worker_, &p, &ep);
    if (st != UCS_OK && peer_error_mode_) {
      peer_error_mode_ = false;
      p.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      st = ucp_ep_create(worker_, &p, &ep);
    }
    if (st != UCS_OK)
      return Status::IOError("UCX endpoint to " + state->remote + ": " + UcsError(st));
    ctx->ep = ep;
    state->ep = ep;
    contexts_.push_back(std::move(ctx));
    const int fd = TcpStreamFd(*state->control);
    if (fd >= 0) {
      control_fds_[fd] = state;
      AddFd(fd);
    }
    return Status::Ok();
  }

  // Starts a send; true when it is still in progress. Holds worker_mu_.
  bool SendOnThread(SendRequest* r, const uint8_t* bytes) {
    StreamState& s = *r->state;
    auto ep = static_cast<ucp_ep_h>(s.ep);
    if (ep == nullptr || s.closing) {
      Complete(r, UCS_ERR_CANCELED);
      return false;
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &Impl::OnSendDone;
    p.user_data = r;
    ucs_status_ptr_t sp = ucp_am_send_nbx(ep, kAmId, r->header, kAmHeaderBytes, bytes, r->length, &p);
    if (sp == nullptr) {
      Complete(r, UCS_OK);
      return false;
    }
    if (UCS_PTR_IS_ERR(sp)) {
      Complete(r, UCS_PTR_STATUS(sp));
      return false;
    }
    r->engine = this;
    in_flight_.insert(r);
    return true;
  }

  void BeginClose(const std::shared_ptr<StreamState>& s, bool force) {
    if (s->closing) {
      if (force) FinishClose(s);
      return;
    }
    s->closing = true;
    auto ep = static_cast<ucp_ep_h>(s->ep);
    if (ep == nullptr || force) {
      FinishClose(s);
      return;
    }
    auto* flush = new FlushRequest{this, s};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &Impl::OnFlushDone;
    p.user_data = flush;
    ucs_status_ptr_t sp = ucp_ep_flush_nbx(ep, &p);
    if (!UCS_PTR_IS_PTR(sp) || sp == nullptr) {
      s->flushed = sp == nullptr;
      delete flush;
      FinishClose(s);
      return;
    }
    s->flush_deadline = MonotonicSeconds() + kFlushSeconds;
    flushing_.push_back(s);
  }

  // Closes the endpoint (by force: flushed already, or abandoned), sends
  // CLOSE(bytes sent) on the control connection and forgets the stream.
  void FinishClose(std::shared_ptr<StreamState> s) {  // by value: erasing it below must not free it
    flushing_.remove(s);
    if (streams_.erase(s->local_id) == 0) return;  // already finished
    CloseEp(*s);
    if (!s->control_done) {
      uint64_t total;
      {
        // Flushed: every byte handed to UCP reached the peer (a completion
        // callback may still be on its way); otherwise only those whose
        // sends completed.
        std::lock_guard<std::mutex> lock(s->mu);
        total = s->flushed && s->failure.ok() ? s->send_offset : s->send_completed;
      }
      uint8_t close[kCloseBytes];
      std::memcpy(close, kCloseMagic, 4);
      PutU64(close + 4, total);
      (void)s->control->Write(close, 0.2);
    }
    DropControl(*s);
  }

  void CloseEp(StreamState& s) {
    auto ep = static_cast<ucp_ep_h>(s.ep);
    if (ep == nullptr) return;
    s.ep = nullptr;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &p);
    EpContext* ctx = nullptr;
    for (auto it = contexts_.begin(); it != contexts_.end(); ++it)
      if ((*it)->ep == ep) {
        ctx = it->get();
        break;
      }
    if (UCS_PTR_IS_PTR(sp) && sp != nullptr) {
      closes_.push_back({sp, ctx});
    } else {
      ForgetContext(ctx);
    }
  }

  void ForgetContext(EpContext* ctx) {
    contexts_.remove_if([ctx](const std::unique_ptr<EpContext>& c) { return c.get() == ctx; });
  }

  void DropControl(StreamState& s) {
    s.control_done = true;
    const int fd = TcpStreamFd(*s.control);
    if (fd >= 0 && control_fds_.erase(fd) > 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    s.control->Close();
  }

  // The control connection is readable: CLOSE, or end of stream.
  void HandleControl(int fd) {
    auto it = control_fds_.find(fd);
    if (it == control_fds_.end()) return;
    std::shared_ptr<StreamState> s = it->second;
    uint8_t buffer[64];
    for (;;) {
      auto n = s->control->Read(buffer, 0);
      if (n.ok()) {
        s->control_buffer.insert(s->control_buffer.end(), buffer, buffer + *n);
        if (s->control_buffer.size() > sizeof(buffer)) break;  // garbage: treated as lost
        while (s->control_buffer.size() >= kCloseBytes) {
          if (!std::equal(kCloseMagic, kCloseMagic + 4, s->control_buffer.begin())) break;
          std::lock_guard<std::mutex> lock(s->mu);
          s->peer_closed = true;
          s->peer_total = GetU64(s->control_buffer.data() + 4);
          s->Notify();
          s->control_buffer.erase(s->control_buffer.begin(),
                                  s->control_buffer.begin() + kCloseBytes);
        }
        if (!s->control_buffer.empty() &&
            !std::equal(s->control_buffer.begin(),
                        s->control_buffer.begin() +
                            std::min<size_t>(4, s->control_buffer.size()),
                        kCloseMagic))
          break;  // not a CLOSE: a protocol violation, treated as lost
        continue;
      }
      if (n.status().code() == StatusCode::kTimeout) return;
      break;  // end of stream or error
    }
    {
      std::lock_guard<std::mutex> lock(s->mu);
      if (!s->peer_closed)
        SetFailure(*s, Status::Unavailable("peer " + s->remote +
                                           " failed: its control connection ended without "
                                           "closing the stream"));
      s->Notify();
    }
    DropControl(*s);
  }

  // --- UCP callbacks (engine thread, inside ucp_worker_progress) ---------

  static void OnSendDone(void* request, ucs_status_t status, void* user_data) {
    auto* r = static_cast<SendRequest*>(user_data);
    if (r->engine != nullptr) r->engine->in_flight_.erase(r);
    Complete(r, status);
    ucp_request_free(request);
  }

  static void Complete(SendRequest* r, ucs_status_t status) {
    StreamState& s = *r->state;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.last_progress = MonotonicSeconds();
      if (status == UCS_OK && r->data) s.send_completed += r->length;
      if (r->op != nullptr) {
        WriteOp& op = *r->op;
        --op.outstanding;
        if (status != UCS_OK && op.error.ok())
          op.error = Status::Unavailable("UCX send to " + s.remote + ": " + UcsError(status));
        if (op.outstanding == 0) FinishWriteOp(s, op);
      }
      s.Notify();
    }
    delete r;
  }

  static void OnFlushDone(void* request, ucs_status_t status, void* user_data) {
    auto* flush = static_cast<FlushRequest*>(user_data);
    flush->state->flushed = status == UCS_OK;
    flush->engine->ready_to_finish_.push_back(flush->state);
    delete flush;
    ucp_request_free(request);
  }

  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* ctx = static_cast<EpContext*>(arg);
    std::shared_ptr<StreamState> s = ctx->state.lock();
    if (!s) return;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      SetFailure(*s, Status::Unavailable("UCX endpoint to " + s->remote + " failed: " +
                                         UcsError(status)));
    }
    Impl* engine = ctx->engine;
    engine->Post([engine, s, ep] {
      if (s->ep == ep) engine->CloseEp(*s);
    });
  }

  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param) {
    auto* engine = static_cast<Impl*>(arg);
    const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (header_length != kAmHeaderBytes) return UCS_OK;  // not ours: dropped
    const auto* h = static_cast<const uint8_t*>(header);
    StreamId id;
    std::memcpy(id.data(), h + 8, id.size());
    const uint64_t value = GetU64(h + 24);
    auto it = engine->streams_.find(id);
    if (it == engine->streams_.end()) return UCS_OK;  // unknown stream: dropped unread
    std::shared_ptr<StreamState> s = it->second;
    std::unique_lock<std::mutex> lock(s->mu);
    if (h[0] == kAmCredit) {
      if (length != 0 || value > s->send_offset) {
        SetFailure(*s, Status::Corruption("peer " + s->remote + " sent an invalid credit"));
      } else if (value > s->peer_read) {
        s->peer_read = value;
        s->last_progress = MonotonicSeconds();
        s->Notify();
      }
      return UCS_OK;
    }
    if (h[0] != kAmData) {
      SetFailure(*s, Status::Corruption("peer " + s->remote + " sent an unknown message kind"));
      return UCS_OK;
    }
    if (s->local_closed || !s->failure.ok() || length == 0) return UCS_OK;
    // Within the window, not overlapping what is held.
    bool valid = value >= s->read_offset && length <= s->window &&
                 value - s->read_offset <= s->window - length;
    if (valid) {
      auto next = s->segments.lower_bound(value);
      if (next != s->segments.end() && next->first < value + length) valid = false;
      if (valid && next != s->segments.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second.length > value) valid = false;
      }
    }
    if (!valid) {
      SetFailure(*s, Status::Corruption("peer " + s->remote +
                                        " sent bytes outside its receive window"));
      return UCS_OK;
    }
    Segment seg;
    seg.length = length;
    AllocateSegment(*s, seg);
    uint8_t* dst = seg.data.get();
    if (!rndv) {
      std::memcpy(dst, data, length);
      seg.complete = true;
      s->segments.emplace(value, std::move(seg));
      s->Notify();
      return UCS_OK;
    }
    // Rendezvous: fetched at once into the segment buffer, so a write
    // within the window completes whether or not the peer reads meanwhile.
    s->segments.emplace(value, std::move(seg));
    lock.unlock();
    (void)engine->StartReceive(s, value, data, dst, length);
    return UCS_INPROGRESS;
  }

  // Starts receiving rendezvous data into dst; true while it is in flight
  // (Received runs on completion), false when it already ended. Worker
  // mutex held.
  bool StartReceive(const std::shared_ptr<StreamState>& s, uint64_t offset, void* desc,
                    uint8_t* dst, size_t length) {
    auto* r = new RecvRequest{s, offset};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = &Impl::OnRecvDone;
    p.user_data = r;
    ucs_status_ptr_t sp = ucp_am_recv_data_nbx(worker_, desc, dst, length, &p);
    if (sp == nullptr) {
      Received(r, UCS_OK);
      return false;
    }
    if (UCS_PTR_IS_ERR(sp)) {
      Received(r, UCS_PTR_STATUS(sp));
      return false;
    }
    return true;
  }

  static void OnRecvDone(void* request, ucs_status_t status, size_t, void* user_data) {
    Received(static_cast<RecvRequest*>(user_data), status);
    ucp_request_free(request);
  }

  static void Received(RecvRequest* r, ucs_status_t status) {
    StreamState& s = *r->state;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.segments.find(r->offset);
      if (it != s.segments.end()) {
        if (status == UCS_OK) {
          it->second.complete = true;
        } else {
          // UCP is done with the buffer: drop the segment so that readers
          // see the failure instead of waiting for it.
          s.segments.erase(it);
          SetFailure(s, Status::Unavailable("UCX receive from " + s.remote + ": " +
                                            UcsError(status)));
        }
      }
      s.Notify();
    }
    delete r;
  }

 private:
  void Wake() {
    uint64_t one = 1;
    if (event_fd_ >= 0) (void)!::write(event_fd_, &one, sizeof(one));
  }

  void AddFd(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }

  // Whether to ask UCX for peer-failure handling: only when `tls` lists
  // network transports alone. UCX 1.13's shared-memory transports (posix,
  // sysv, cma, self, ...) cannot handle peer failure, and asking for it with
  // every transport allowed (tls empty) makes UCX route even same-host
  // streams over tcp. Without it a dead peer is still detected by the
  // control connection.
  static bool WantsPeerErrorMode(const std::string& tls) {
    if (tls.empty() || tls[0] == '^') return false;
    size_t start = 0;
    while (start <= tls.size()) {
      size_t end = tls.find(',', start);
      if (end == std::string::npos) end = tls.size();
      const std::string t = tls.substr(start, end - start);
      for (const char* local : {"sm", "shm", "posix", "sysv", "xpmem", "knem", "cma", "self",
                                "cuda", "rocm", "all"})
        if (t.rfind(local, 0) == 0) return false;
      start = end + 1;
    }
    return true;
  }

  Status InitUcp() {
    peer_error_mode_ = WantsPeerErrorMode(options_.tls);
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) return Status::IOError("UCX config: " + UcsError(st));
    if (!options_.tls.empty()) st = ucp_config_modify(config, "TLS", options_.tls.c_str());
    if (st == UCS_OK && !options_.net_devices.empty())
      st = ucp_config_modify(config, "NET_DEVICES", options_.net_devices.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return Status::InvalidArgument("UCX config (tls '" + options_.tls + "', devices '" +
                                     options_.net_devices + "'): " + UcsError(st));
    }
    // UCP's keepalive declares a silent peer dead (and completes its
    // endpoint's sends with an error) after about this long; UCX's default
    // of 20 s would hold a write that timed out on a dead link that long
    // before it may return. $UCX_KEEPALIVE_INTERVAL overrides it.
    if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr)
      (void)ucp_config_modify(config, "KEEPALIVE_INTERVAL", "2s");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    st = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (st != UCS_OK) return Status::IOError("UCX init (tls '" + options_.tls + "'): " + UcsError(st));
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // Every UCP call holds worker_mu_ (the engine thread and callers'
    // direct sends): serialized use.
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    st = ucp_worker_create(context_, &wp, &worker_);
    if (st != UCS_OK) return Status::IOError("UCX worker: " + UcsError(st));
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                    UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = kAmId;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = &Impl::OnAm;
    hp.arg = this;
    st = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (st != UCS_OK) return Status::IOError("UCX am handler: " + UcsError(st));
    ucp_address_t* address = nullptr;
    size_t length = 0;
    st = ucp_worker_get_address(worker_, &address, &length);
    if (st != UCS_OK) return Status::IOError("UCX worker address: " + UcsError(st));
    const auto* bytes = reinterpret_cast<const uint8_t*>(address);
    address_.assign(bytes, bytes + length);
    ucp_worker_release_address(worker_, address);
    int efd = -1;
    if (ucp_worker_get_efd(worker_, &efd) == UCS_OK && efd >= 0) {
      AddFd(efd);
      wakeup_ = true;
    }
    return Status::Ok();
  }

  void Run(std::promise<Status>* started) {
    Status s = InitUcp();
    const bool ok = s.ok();
    started->set_value(std::move(s));
    if (ok) Loop();
    Shutdown();
  }

  bool RunCommands() {
    std::deque<std::function<void()>> batch;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      batch.swap(queue_);
    }
    for (auto& fn : batch) fn();
    return !batch.empty();
  }

  // One round of the engine's work; true when anything happened. Caller
  // holds worker_mu_.
  bool Step() {
    bool busy = RunCommands();
    // Bounded, so that commands (endpoint creation for a bootstrap waiting
    // on it) run even while UCX reports progress on every call.
    for (int i = 0; i < 256 && ucp_worker_progress(worker_) != 0; ++i) busy = true;
    while (!ready_to_finish_.empty()) {
      auto s = ready_to_finish_.front();
      ready_to_finish_.pop_front();
      FinishClose(s);
      busy = true;
    }
    const double now = MonotonicSeconds();
    for (auto it = flushing_.begin(); it != flushing_.end();) {
      auto s = *it++;
      if (now < s->flush_deadline) continue;
      // Abandoned only after kFlushSeconds without a send completing: a
      // slow reader still gets every byte written before the close.
      double last_progress;
      {
        std::lock_guard<std::mutex> lock(s->mu);
        last_progress = s->last_progress;
      }
      if (last_progress + kFlushSeconds > now) {
        s->flush_deadline = last_progress + kFlushSeconds;
      } else {
        FinishClose(s);
      }
    }
    for (auto it = closes_.begin(); it != closes_.end();) {
      if (ucp_request_check_status(it->first) != UCS_INPROGRESS) {
        ucp_request_free(it->first);
        ForgetContext(it->second);
        it = closes_.erase(it);
      } else {
        ++it;
      }
    }
    return busy;
  }

  void Loop() {
    epoll_event events[32];
    int busy_arms = 0;  // consecutive arms answered busy, since busy_arm_since
    double busy_arm_since = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> worker(worker_mu_);
        const bool busy = Step();
        if (busy) busy_arms = 0;
        {
          std::lock_guard<std::mutex> lock(queue_mu_);
          if (stop_) return;
          if (busy || !queue_.empty()) continue;
        }
        if (wakeup_) {
          ucs_status_t armed = ucp_worker_arm(worker_);
          if (armed == UCS_ERR_BUSY) {
            // Events pending that progress did not consume (e.g. the error
            // state of a dead tcp connection, reported on every arm): once
            // that has lasted 100 ms, poll every millisecond instead of
            // spinning.
            if (busy_arms++ == 0) busy_arm_since = MonotonicSeconds();
            if (MonotonicSeconds() - busy_arm_since < 0.1) continue;
          } else {
            busy_arms = 0;
            if (armed != UCS_OK) wakeup_ = false;
          }
        }
        std::lock_guard<std::mutex> lock(queue_mu_);
        if (!queue_.empty() || stop_) continue;
        sleeping_ = true;
      }
      const bool pending = !flushing_.empty() || !closes_.empty();
      const int timeout_ms = !wakeup_ || busy_arms > 0 ? 1 : pending ? 10 : 200;
      int n = ::epoll_wait(epoll_fd_, events, 32, timeout_ms);
      {
        std::lock_guard<std::mutex> lock(queue_mu_);
        sleeping_ = false;
      }
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == event_fd_) {
          uint64_t v;
          while (::read(event_fd_, &v, sizeof(v)) > 0) {
          }
        } else if (control_fds_.count(fd)) {
          HandleControl(fd);
        }
      }
    }
  }


 public:
  // A send from the caller's thread (no hand-off to the engine thread): the
  // common case, an eager message or a rendezvous start, costs no wake-up;
  // one still in progress wakes the engine to drive it.
  void SendNow(SendRequest* r, const uint8_t* bytes) {
    bool in_progress;
    {
      std::lock_guard<std::mutex> worker(worker_mu_);
      in_progress = SendOnThread(r, bytes);
    }
    if (in_progress) {
      bool wake;
      {
        std::lock_guard<std::mutex> lock(queue_mu_);
        wake = sleeping_;
      }
      if (wake) Wake();
    }
  }
 private:

  void Shutdown() {
    std::lock_guard<std::mutex> worker(worker_mu_);
    RunCommands();
    while (!streams_.empty()) FinishClose(streams_.begin()->second);
    const double deadline = MonotonicSeconds() + 1.0;
    while (!closes_.empty() && MonotonicSeconds() < deadline) {
      ucp_worker_progress(worker_);
      for (auto it = closes_.begin(); it != closes_.end();) {
        if (ucp_request_check_status(it->first) != UCS_INPROGRESS) {
          ucp_request_free(it->first);
          it = closes_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    // Sends UCP never completed (shared memory to a dead peer has no
    // failure detection): their callbacks will not come now; release their
    // write-behind copies and states.
    for (SendRequest* r : std::exchange(in_flight_, {})) Complete(r, UCS_ERR_CANCELED);
    if (context_ != nullptr) ucp_cleanup(context_);
    worker_ = nullptr;
    context_ = nullptr;
  }

  Options options_;
  std::thread thread_;
  int event_fd_ = -1;
  int epoll_fd_ = -1;
  std::mutex worker_mu_;  // held around every UCP call
  std::mutex queue_mu_;
  std::deque<std::function<void()>> queue_;
  bool sleeping_ = false;
  bool stop_ = false;

  // Engine-thread only.
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  bool wakeup_ = false;
  std::atomic<bool> peer_error_mode_{true};
  std::vector<uint8_t> address_;
  std::map<StreamId, std::shared_ptr<StreamState>> streams_;
  std::map<int, std::shared_ptr<StreamState>> control_fds_;
  std::list<std::shared_ptr<StreamState>> flushing_;
  std::deque<std::shared_ptr<StreamState>> ready_to_finish_;
  std::list<std::pair<void*, EpContext*>> closes_;
  std::unordered_set<SendRequest*> in_flight_;  // sends UCP holds (worker mutex)
  std::list<std::unique_ptr<EpContext>> contexts_;
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::shared_ptr<Engine>> Engine::Create(const Options& options) {
  auto impl = std::make_unique<Impl>(options);
  std::vector<uint8_t> address;
  KVSERVE_RETURN_IF_ERROR(impl->Start(&address));
  std::shared_ptr<Engine> engine(new Engine(std::move(impl)));
  engine->worker_address_ = std::move(address);
  engine->description_ = options.tls.empty() ? "UCX default transports" : options.tls;
  return engine;
}

Status Engine::Register(const std::shared_ptr<StreamState>& state) {
  return impl_->Call([this, state] {
    impl_->RegisterOnThread(state);
    return Status::Ok();
  });
}

Status Engine::Open(const std::shared_ptr<StreamState>& state,
                    std::span<const uint8_t> peer_address) {
  std::vector<uint8_t> peer(peer_address.begin(), peer_address.end());
  return impl_->Call([this, state, peer = std::move(peer)]() mutable {
    return impl_->OpenOnThread(state, std::move(peer));
  });
}

void Engine::Send(const std::shared_ptr<StreamState>& state, const uint8_t* bytes, size_t length,
                  uint64_t offset, const std::shared_ptr<WriteOp>& op) {
  auto* r = new SendRequest;
  r->state = state;
  r->op = op;
  r->data = true;
  r->length = length;
  EncodeHeader(kAmData, state->peer_id, offset, r->header);
  Impl* impl = impl_.get();
  impl->SendNow(r, bytes);
}

void Engine::Credit(const std::shared_ptr<StreamState>& state, uint64_t read_total) {
  auto* r = new SendRequest;
  r->state = state;
  EncodeHeader(kAmCredit, state->peer_id, read_total, r->header);
  Impl* impl = impl_.get();
  impl->SendNow(r, nullptr);
}

bool Engine::SendsAlwaysComplete() const { return impl_->peer_error_mode(); }

void Engine::Close(const std::shared_ptr<StreamState>& state, bool force) {
  Impl* impl = impl_.get();
  impl->Post([impl, state, force] { impl->BeginClose(state, force); });
}

void AllocateSegment(StreamState& s, Segment& seg) {
  if (seg.length <= s.segment_bytes && seg.length * 4 >= s.segment_bytes) {
    seg.pooled = true;
    if (!s.free_buffers.empty()) {
      seg.data = std::move(s.free_buffers.back());
      s.free_buffers.pop_back();
    } else {
      seg.data.reset(new uint8_t[s.segment_bytes]);
    }
  } else {
    seg.data.reset(new uint8_t[seg.length]);
  }
}

void FinishWriteOp(StreamState& s, WriteOp& op) {
  if (op.owned == nullptr) return;
  s.buffered -= op.owned_bytes;
  op.owned_bytes = 0;
  if (!op.error.ok() && s.failure.ok()) s.failure = op.error;
  if (op.pooled && (s.send_free_buffers.size() + 1) * BufferedWriteMax(s) <= s.write_behind_limit)
    s.send_free_buffers.push_back(std::move(op.owned));
}

uint64_t BufferedWriteMax(const StreamState& s) {
  return std::min<uint64_t>(s.write_behind_limit,
                            std::max<uint64_t>(s.segment_bytes, s.write_behind_limit / 4));
}

Status RandomStreamId(StreamId* id) {
  if (RAND_bytes(id->data(), static_cast<int>(id->size())) != 1)
    return Status::Internal("RAND_bytes failed");
  return Status::Ok();
}

}  // namespace kvserve::transport::ucx

