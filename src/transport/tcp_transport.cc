// Copyright kvserve authors. TCP streams over standalone asio. Sockets run in
// non-blocking mode; waits use poll() with the caller's timeout, so every
// blocking call is bounded and Close() (shutdown) wakes a waiting thread.
#include <asio.hpp>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "kvserve/transport.h"
#include "transport/poll_wait.h"
#include "transport/tcp_internal.h"

namespace kvserve {
namespace {

using asio::ip::tcp;

Status FromError(const asio::error_code& ec, std::string_view what) {
  std::string m = std::string(what) + ": " + ec.message();
  if (ec == asio::error::connection_refused || ec == asio::error::connection_reset ||
      ec == asio::error::broken_pipe || ec == asio::error::eof ||
      ec == asio::error::not_connected || ec == asio::error::shut_down ||
      ec == asio::error::host_unreachable || ec == asio::error::network_unreachable ||
      ec == asio::error::connection_aborted || ec == asio::error::bad_descriptor ||
      ec == asio::error::address_in_use)
    return Status::Unavailable(m);
  return Status::IOError(m);
}

// Splits "host:port" / "[v6]:port".
Result<std::pair<std::string, uint16_t>> SplitAddress(const std::string& address) {
  std::string host, port;
  if (!address.empty() && address[0] == '[') {
    size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':')
      return Status::InvalidArgument("malformed address '" + address + "' (want [v6]:port)");
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string::npos || address.find(':') != colon)
      return Status::InvalidArgument("malformed address '" + address + "' (want host:port)");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (host.empty() || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) > 65535)
    return Status::InvalidArgument("malformed address '" + address + "'");
  return std::make_pair(host, static_cast<uint16_t>(std::stoul(port)));
}

Result<tcp::endpoint> Resolve(const std::string& address) {
  KVSERVE_ASSIGN_OR_RETURN(auto hp, SplitAddress(address));
  std::string host = hp.first == "localhost" ? "127.0.0.1" : hp.first;
  asio::error_code ec;
  asio::ip::address ip = asio::ip::make_address(host, ec);
  if (ec)
    return Status::InvalidArgument("address '" + address +
                                   "': host must be numeric IPv4/IPv6 or localhost");
  return tcp::endpoint(ip, hp.second);
}

std::string EndpointString(const tcp::endpoint& ep) {
  if (ep.address().is_v6()) return "[" + ep.address().to_string() + "]:" + std::to_string(ep.port());
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

class TcpStream final : public Stream {
 public:
  TcpStream(std::shared_ptr<asio::io_context> io, tcp::socket socket, std::string remote)
      : io_(std::move(io)), socket_(std::move(socket)), remote_(std::move(remote)) {
    fd_ = socket_.native_handle();
  }
  ~TcpStream() override {
    asio::error_code ec;
    socket_.close(ec);
  }

  Status Write(std::span<const uint8_t> bytes, double timeout_seconds) override {
    size_t done = 0;
    while (done < bytes.size()) {
      if (closed_.load()) return Status::Unavailable("stream closed");
      asio::error_code ec;
      size_t n = socket_.write_some(asio::buffer(bytes.data() + done, bytes.size() - done), ec);
      done += n;
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        KVSERVE_RETURN_IF_ERROR(
            transport::WaitFd(socket_.native_handle(), POLLOUT, timeout_seconds)
                .WithContext("write to " + remote_));
        continue;
      }
      if (ec) return FromError(ec, "write to " + remote_);
    }
    return Status::Ok();
  }

  Result<size_t> Read(std::span<uint8_t> buffer, double timeout_seconds) override {
    if (buffer.empty()) return Status::InvalidArgument("Read into an empty buffer");
    for (;;) {
      if (closed_.load()) return Status::Unavailable("stream closed");
      asio::error_code ec;
      size_t n = socket_.read_some(asio::buffer(buffer.data(), buffer.size()), ec);
      if (n > 0) return n;
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        KVSERVE_RETURN_IF_ERROR(
            transport::WaitFd(socket_.native_handle(), POLLIN, timeout_seconds)
                .WithContext("read from " + remote_));
        continue;
      }
      if (ec == asio::error::eof || !ec)
        return Status::Unavailable("connection closed by peer " + remote_);
      return FromError(ec, "read from " + remote_);
    }
  }

  void Close() override {
    if (closed_.exchange(true)) return;
    // shutdown (not close) so a thread blocked in poll wakes and the fd
    // stays valid until the destructor.
    ::shutdown(socket_.native_handle(), SHUT_RDWR);
  }

  std::string RemoteAddress() const override { return remote_; }
  int PollHandle() const override { return fd_; }

 private:
  std::shared_ptr<asio::io_context> io_;
  tcp::socket socket_;
  std::string remote_;
  int fd_ = -1;
  std::atomic<bool> closed_{false};
};

Status ConfigureSocket(tcp::socket& socket, const TcpTransportOptions& options) {
  asio::error_code ec;
  socket.non_blocking(true, ec);
  if (ec) return FromError(ec, "set non-blocking");
  socket.set_option(tcp::no_delay(true), ec);
  if (options.socket_buffer_bytes > 0) {
    socket.set_option(asio::socket_base::send_buffer_size(options.socket_buffer_bytes), ec);
    socket.set_option(asio::socket_base::receive_buffer_size(options.socket_buffer_bytes), ec);
  }
  return Status::Ok();
}

class TcpListener final : public Listener {
 public:
  TcpListener(std::shared_ptr<asio::io_context> io, tcp::acceptor acceptor,
              TcpTransportOptions options)
      : io_(std::move(io)), acceptor_(std::move(acceptor)), options_(options) {
    asio::error_code ec;
    address_ = EndpointString(acceptor_.local_endpoint(ec));
  }
  ~TcpListener() override {
    asio::error_code ec;
    acceptor_.close(ec);
  }

  Result<std::unique_ptr<Stream>> Accept(double timeout_seconds) override {
    const double deadline = timeout_seconds < 0 ? -1 : MonotonicSeconds() + timeout_seconds;
    for (;;) {
      if (closed_.load()) return Status::Unavailable("listener closed");
      // Wait in short slices so Close() is noticed promptly even where
      // shutdown() does not wake poll() on a listening socket.
      double slice = 0.1;
      if (deadline >= 0) {
        double left = deadline - MonotonicSeconds();
        if (left <= 0) return Status::Timeout("no connection within " +
                                              std::to_string(timeout_seconds) + " s");
        slice = std::min(slice, left);
      }
      Status w = transport::WaitFd(acceptor_.native_handle(), POLLIN, slice);
      if (w.code() == StatusCode::kTimeout) continue;
      KVSERVE_RETURN_IF_ERROR(w);
      asio::error_code ec;
      tcp::socket socket(*io_);
      acceptor_.accept(socket, ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again ||
          ec == asio::error::connection_aborted)
        continue;
      if (ec) return FromError(ec, "accept on " + address_);
      KVSERVE_RETURN_IF_ERROR(ConfigureSocket(socket, options_));
      std::string remote = EndpointString(socket.remote_endpoint(ec));
      return std::unique_ptr<Stream>(new TcpStream(io_, std::move(socket), remote));
    }
  }

  std::string Address() const override { return address_; }
  void Close() override {
    if (closed_.exchange(true)) return;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
  }

 private:
  std::shared_ptr<asio::io_context> io_;
  tcp::acceptor acceptor_;
  TcpTransportOptions options_;
  std::string address_;
  std::atomic<bool> closed_{false};
};

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(TcpTransportOptions options)
      : io_(std::make_shared<asio::io_context>()), options_(options) {}

  Result<std::unique_ptr<Stream>> Connect(const std::string& address,
                                          double timeout_seconds) override {
    KVSERVE_ASSIGN_OR_RETURN(tcp::endpoint ep, Resolve(address));
    asio::error_code ec;
    tcp::socket socket(*io_);
    socket.open(ep.protocol(), ec);
    if (ec) return FromError(ec, "socket");
    KVSERVE_RETURN_IF_ERROR(ConfigureSocket(socket, options_));
    // Non-blocking connect with a poll-bounded wait (asio's synchronous
    // connect would wait without a deadline).
    int fd = socket.native_handle();
    int rc = ::connect(fd, ep.data(), static_cast<socklen_t>(ep.size()));
    if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
      return FromError(asio::error_code(errno, asio::system_category()), "connect to " + address);
    }
    if (rc != 0) {
      Status w = transport::WaitFd(fd, POLLOUT, timeout_seconds);
      if (w.code() == StatusCode::kTimeout)
        return Status::Timeout("connect to " + address + ": not established within " +
                               std::to_string(timeout_seconds) + " s");
      KVSERVE_RETURN_IF_ERROR(w);
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0)
        return FromError(asio::error_code(err, asio::system_category()), "connect to " + address);
    }
    return std::unique_ptr<Stream>(new TcpStream(io_, std::move(socket), EndpointString(ep)));
  }

  Result<std::unique_ptr<Listener>> Listen(const std::string& address) override {
    KVSERVE_ASSIGN_OR_RETURN(tcp::endpoint ep, Resolve(address));
    asio::error_code ec;
    tcp::acceptor acceptor(*io_);
    acceptor.open(ep.protocol(), ec);
    if (ec) return FromError(ec, "listen socket");
    acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    acceptor.bind(ep, ec);
    if (ec) return FromError(ec, "bind " + address);
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return FromError(ec, "listen " + address);
    acceptor.non_blocking(true, ec);
    return std::unique_ptr<Listener>(new TcpListener(io_, std::move(acceptor), options_));
  }

 private:
  std::shared_ptr<asio::io_context> io_;
  TcpTransportOptions options_;
};

}  // namespace

std::unique_ptr<Transport> NewTcpTransport(TcpTransportOptions options) {
  return std::make_unique<TcpTransport>(options);
}

namespace transport {
int TcpStreamFd(const Stream& stream) {
  auto* tcp = dynamic_cast<const TcpStream*>(&stream);
  return tcp == nullptr ? -1 : tcp->PollHandle();
}
}  // namespace transport

}  // namespace kvserve
