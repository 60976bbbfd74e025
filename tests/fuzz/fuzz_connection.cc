// libFuzzer target for the transport's wire formats (docs/transport.md §2-§4).
// The first byte picks what the rest of the input is:
//   0: what a client sends a server's handshake (HELLO, RESPONSE, ...);
//   1: what a server answers a client's HELLO (CHALLENGE, AUTH_OK, ERROR);
//   2: what an authenticated peer sends after a real handshake (loopback
//      transport, shared secret): the server receives messages the way the
//      decode worker does, frames streamed through ReceiveFrameFrom into a
//      DecoderContext when a header's cache is small enough to hold.
// Any input must end in OK or an error Status: no crash, hang (every wait is
// bounded), out-of-bounds access, or allocation beyond what the bytes
// justify (the fuzzers run with -rss_limit_mb=512 -malloc_limit_mb=512).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/transport.h"

namespace {

using namespace kvserve;

// Reads return the input in pieces whose sizes the input also picks; then
// end of stream. Writes are discarded.
class ScriptedStream final : public Stream {
 public:
  explicit ScriptedStream(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  Status Write(std::span<const uint8_t>, double) override { return Status::Ok(); }
  Result<size_t> Read(std::span<uint8_t> buffer, double) override {
    if (pos_ >= bytes_.size()) return Status::Unavailable("end of script");
    const size_t piece = 1 + bytes_[pos_] % 64;
    const size_t n = std::min({buffer.size(), piece, bytes_.size() - pos_});
    std::memcpy(buffer.data(), bytes_.data() + pos_, n);
    pos_ += n;
    return n;
  }
  void Close() override { pos_ = bytes_.size(); }
  std::string RemoteAddress() const override { return "script"; }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

ConnectionOptions Options() {
  ConnectionOptions o;
  o.secret = "fuzz-secret";
  o.io_timeout_seconds = 1;
  o.handshake_timeout_seconds = 1;
  o.max_message_bytes = 1 << 20;
  return o;
}

// Mode 2: the server side of an authenticated connection handling `bytes`.
void AuthenticatedPeer(std::span<const uint8_t> bytes) {
  static std::unique_ptr<Transport> loop = NewLoopbackTransport();
  static std::unique_ptr<Listener> listener = [] {
    auto l = loop->Listen("fuzz-connection");
    if (!l.ok()) __builtin_trap();
    return std::move(*l);
  }();
  std::unique_ptr<Connection> server;
  std::thread accept([&] {
    auto c = Connection::Accept(*listener, Options(), 5);
    if (c.ok()) server = std::move(*c);
  });
  auto raw = loop->Connect("fuzz-connection", 5);
  if (!raw.ok()) __builtin_trap();
  auto shared = std::shared_ptr<Stream>(std::move(*raw));
  auto client = Connection::Establish(std::make_unique<SharedStream>(shared),
                                      Connection::Role::kClient, Options());
  accept.join();
  if (!client.ok() || !server) __builtin_trap();  // the real handshake must work
  (void)shared->Write(bytes, 1);                  // under the framing, as a hostile peer
  shared->Close();

  auto decoder = DecoderContext::Create({.threads = 1});
  if (!decoder.ok()) __builtin_trap();
  KvCache kv;
  FrameHandler handler;
  handler.on_header = [&](uint64_t, std::span<const uint8_t> header) -> Status {
    KVSERVE_RETURN_IF_ERROR((*decoder)->Start(header).status());
    const FrameInfo& info = (*decoder)->info();
    if (info.shape.NumElements() > (int64_t{1} << 20))
      return Status::ResourceExhausted("frame larger than the harness's budget");
    kv = KvCache(info.dtype, info.shape);
    return Status::Ok();
  };
  handler.on_record = [&](std::span<const uint8_t> record) -> Status {
    return (*decoder)->DecodeRecord(record, kv.mutable_view()).status();
  };
  Message m;
  for (int i = 0; i < 64; ++i) {
    if (!server->Receive(&m, 0.5).ok()) break;
    if (m.type == kMsgFrameBegin) (void)ReceiveFrameFrom(*server, m, handler);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      (void)Connection::Establish(std::make_unique<ScriptedStream>(rest), Connection::Role::kServer,
                                  Options());
      break;
    case 1: {
      auto c = Connection::Establish(std::make_unique<ScriptedStream>(rest),
                                     Connection::Role::kClient, Options());
      // A fuzzed server cannot prove the secret: the MAC is over our nonce.
      if (c.ok()) __builtin_trap();
      break;
    }
    default:
      AuthenticatedPeer(rest);
  }
  return 0;
}
