// Copyright kvserve authors. kvserve's transport from Python: TCP (and UCX,
// where the build has it) streams, authenticated framed connections with
// token-bucket shaping and goodput samples, and layer-streamed frames
// (include/kvserve/transport.h, docs/transport.md). Every blocking call
// releases the GIL; the goodput samples go straight from the transferring
// thread into a BandwidthEstimator (no Python code on that path).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "bindings.h"
#include "errors.h"
#include "held_bytes.h"
#include "kvserve/controller.h"
#include "kvserve/transport.h"

namespace kvserve::python {
namespace py = pybind11;
namespace {

// Connection options from Python keywords. `estimator` (may be null)
// receives every goodput sample of the connection; it is kept alive by the
// callback.
ConnectionOptions MakeOptions(const std::string& secret, const std::string& local_id,
                              double shape_gbps, double io_timeout, double connect_timeout,
                              double handshake_timeout, uint64_t max_message_bytes,
                              std::shared_ptr<BandwidthEstimator> estimator) {
  if (!(shape_gbps >= 0) || !std::isfinite(shape_gbps)) ThrowInvalid("shape_gbps: must be >= 0");
  if (!(io_timeout > 0) || !(connect_timeout > 0) || !(handshake_timeout > 0))
    ThrowInvalid("timeouts: must be > 0 seconds");
  if (local_id.size() > 255) ThrowInvalid("local_id: at most 255 bytes");
  if (max_message_bytes == 0) ThrowInvalid("max_message_bytes: must be > 0");
  ConnectionOptions o;
  o.secret = secret;
  o.local_id = local_id;
  o.shape_bytes_per_second = GbpsToBytesPerSecond(shape_gbps);
  o.io_timeout_seconds = io_timeout;
  o.connect_timeout_seconds = connect_timeout;
  o.handshake_timeout_seconds = handshake_timeout;
  o.max_message_bytes = max_message_bytes;
  if (estimator) {
    o.goodput = [estimator](std::string_view peer, double bytes, double seconds) {
      // Samples the estimator refuses (non-positive) carry no information.
      (void)estimator->Observe(peer, bytes, seconds, MonotonicSeconds());
    };
  }
  return o;
}

// The transport outlives every listener and connection made from it (a UCX
// stream refers to its transport's engine): each holds a shared_ptr.
using TransportPtr = std::shared_ptr<Transport>;

class PyConnection {
 public:
  PyConnection(TransportPtr transport, std::unique_ptr<Connection> connection)
      : transport_(std::move(transport)), connection_(std::move(connection)) {}

  Connection& get() {
    if (!connection_) ThrowInvalid("connection is closed");
    return *connection_;
  }

  void Send(int type, py::handle payload, int flags) {
    if (type < 0 || type > kMaxUserMessageType)
      ThrowInvalid("type: user message types are 0.." + std::to_string(kMaxUserMessageType));
    if (flags < 0 || flags > 255) ThrowInvalid("flags: 0..255");
    Connection& c = get();
    HeldBytes bytes(payload, "payload");
    Status s;
    {
      py::gil_scoped_release release;
      s = c.Send(static_cast<uint8_t>(type), static_cast<uint8_t>(flags), bytes.span());
    }
    ThrowIfError(s);
  }

  // One Message per call: receives from two Python threads must not share a
  // buffer (Connection serialises them, but the copy into bytes happens after).
  py::tuple Receive(std::optional<double> timeout) {
    Connection& c = get();
    Message message;
    Status s;
    {
      py::gil_scoped_release release;
      s = c.Receive(&message, timeout.value_or(-1));
    }
    ThrowIfError(s);
    py::bytes payload(reinterpret_cast<const char*>(message.payload.data()), message.payload.size());
    return py::make_tuple(static_cast<int>(message.type), static_cast<int>(message.flags), payload);
  }

  void Close() {
    if (!connection_) return;
    py::gil_scoped_release release;
    connection_->Close();
  }

  void Fail(const std::string& message) {
    Connection& c = get();
    py::gil_scoped_release release;
    c.Fail(Status::Unavailable(message));
  }

  py::dict Stats() {
    const ConnectionStats s = get().stats();
    py::dict d;
    d["bytes_sent"] = s.bytes_sent;
    d["bytes_received"] = s.bytes_received;
    d["messages_sent"] = s.messages_sent;
    d["messages_received"] = s.messages_received;
    d["send_busy_seconds"] = s.send_busy_seconds;
    return d;
  }

  ~PyConnection() {
    if (connection_) {
      py::gil_scoped_release release;
      connection_.reset();
    }
  }

 private:
  TransportPtr transport_;
  std::unique_ptr<Connection> connection_;
};

class PyListener {
 public:
  PyListener(TransportPtr transport, std::unique_ptr<Listener> listener)
      : transport_(std::move(transport)), listener_(std::move(listener)) {}

  std::string Address() const { return listener_->Address(); }

  std::unique_ptr<PyConnection> Accept(double timeout, const ConnectionOptions& options) {
    Result<std::unique_ptr<Connection>> c = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      c = Connection::Accept(*listener_, options, timeout);
    }
    return std::make_unique<PyConnection>(transport_, ValueOrThrow(std::move(c)));
  }

  void Close() {
    py::gil_scoped_release release;
    listener_->Close();
  }

  ~PyListener() {
    py::gil_scoped_release release;
    listener_.reset();
  }

 private:
  TransportPtr transport_;
  std::unique_ptr<Listener> listener_;
};

class PyTransport {
 public:
  explicit PyTransport(TransportPtr transport, std::string kind)
      : transport_(std::move(transport)), kind_(std::move(kind)) {}

  std::unique_ptr<PyListener> Listen(const std::string& address) {
    Result<std::unique_ptr<Listener>> l = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      l = transport_->Listen(address);
    }
    return std::make_unique<PyListener>(transport_, ValueOrThrow(std::move(l)));
  }

  std::unique_ptr<PyConnection> Dial(const std::string& address, const ConnectionOptions& options) {
    Result<std::unique_ptr<Connection>> c = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      c = Connection::Dial(*transport_, address, options);
    }
    return std::make_unique<PyConnection>(transport_, ValueOrThrow(std::move(c)));
  }

  const std::string& kind() const { return kind_; }

 private:
  TransportPtr transport_;
  std::string kind_;
};

// A FrameSender over a PyConnection (kept alive by the Python reference the
// binding holds, py::keep_alive).
// The Connections of `lanes` (PyConnection objects), in order.
std::vector<Connection*> LaneConnections(const py::object& lanes) {
  std::vector<Connection*> out;
  if (lanes.is_none()) return out;
  for (py::handle h : lanes) out.push_back(&h.cast<PyConnection&>().get());
  return out;
}

class PyFrameSender {
 public:
  PyFrameSender(PyConnection& connection, const py::object& lanes)
      : sender_(&connection.get(), LaneConnections(lanes)) {}

  void Begin(uint64_t transfer_id, py::handle header) {
    HeldBytes bytes(header, "header");
    Status s;
    {
      py::gil_scoped_release release;
      s = sender_.Begin(transfer_id, bytes.span());
    }
    ThrowIfError(s);
  }

  void SendRecord(py::handle record) {
    HeldBytes bytes(record, "record");
    Status s;
    {
      py::gil_scoped_release release;
      s = sender_.SendRecord(bytes.span());
    }
    ThrowIfError(s);
  }

  void Write(uint64_t transfer_id, py::handle data) {
    HeldBytes bytes(data, "data");
    if (!sink_ || transfer_id != sink_transfer_) {
      if (sink_ && sender_.sink_has_partial())
        ThrowInvalid("write: transfer " + std::to_string(sink_transfer_) +
                     " holds an incomplete header or record");
      sink_ = &sender_.sink(transfer_id);
      sink_transfer_ = transfer_id;
    }
    Status s;
    {
      py::gil_scoped_release release;
      s = sink_->Append(bytes.span());
    }
    ThrowIfError(s);
  }

  TransferStats Finish() {
    if (sender_.sink_has_partial())
      ThrowInvalid("finish: write() holds an incomplete header or record (the frame was cut short)");
    Result<TransferStats> r = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      r = sender_.Finish();
    }
    sink_ = nullptr;
    return ValueOrThrow(std::move(r));
  }

  void Abort(const std::string& reason) {
    Status s;
    {
      py::gil_scoped_release release;
      s = sender_.Abort(Status::Unavailable(reason));
    }
    sink_ = nullptr;
    ThrowIfError(s);
  }

 private:
  FrameSender sender_;
  ByteSink* sink_ = nullptr;  // the splitter of the transfer write() feeds
  uint64_t sink_transfer_ = 0;
};

// Runs a Python callback from the receiving thread: takes the GIL, and turns
// a Python exception into a Status that stops delivery (the sender gets it
// as the ack); the exception itself is re-raised once ReceiveFrame returns.
class CallbackGuard {
 public:
  Status Run(const std::function<void()>& call) {
    py::gil_scoped_acquire acquire;
    try {
      call();
      return Status::Ok();
    } catch (py::error_already_set& e) {
      Status s = StatusFromPython(e);
      if (!error_) error_.emplace(std::move(e));
      return s;
    } catch (const StatusError& e) {  // a kvserve call inside the callback
      return e.status;
    }
  }
  // Re-raises the first Python exception a callback raised, if any.
  void Reraise() {
    if (error_) {
      py::error_already_set e = std::move(*error_);
      error_.reset();
      e.restore();
      throw py::error_already_set();
    }
  }

 private:
  std::optional<py::error_already_set> error_;
};

TransferStats ReceiveFrameFromPython(PyConnection& connection, py::object on_header,
                                     py::object on_record, std::optional<double> timeout,
                                     const py::object& lanes) {
  Connection& c = connection.get();
  const std::vector<Connection*> lane_connections = LaneConnections(lanes);
  CallbackGuard guard;
  FrameHandler handler;
  // A writable buffer on_header returned: records are received straight
  // into it, one after another, until one does not fit.
  std::optional<py::buffer_info> into;
  std::span<uint8_t> free_space;
  if (!on_header.is_none()) {
    handler.on_header = [&](uint64_t id, std::span<const uint8_t> header) {
      return guard.Run([&] {
        py::object r =
            on_header(id, py::memoryview::from_memory(header.data(), static_cast<ssize_t>(header.size())));
        if (r.is_none()) return;
        if (!py::isinstance<py::buffer>(r))
          ThrowInvalid("receive_frame: on_header must return None or a writable contiguous 1-D buffer");
        into.emplace(r.cast<py::buffer>().request(/*writable=*/true));
        if (into->ndim != 1 || into->strides[0] != into->itemsize)
          ThrowInvalid("receive_frame: on_header must return None or a writable contiguous 1-D buffer");
        free_space = {static_cast<uint8_t*>(into->ptr), static_cast<size_t>(into->size * into->itemsize)};
      });
    };
    handler.place_record = [&](uint64_t length) -> std::span<uint8_t> {
      if (length > free_space.size()) {
        free_space = {};  // in order: no later record goes into the buffer either
        return {};
      }
      std::span<uint8_t> out = free_space.first(length);
      free_space = free_space.subspan(length);
      return out;
    };
  }
  if (!on_record.is_none()) {
    handler.on_record = [&](std::span<const uint8_t> record) {
      return guard.Run([&] {
        on_record(py::memoryview::from_memory(record.data(), static_cast<ssize_t>(record.size())));
      });
    };
  }
  Result<TransferStats> r = Status::Internal("unset");
  {
    py::gil_scoped_release release;
    r = ReceiveFrame(c, handler, timeout.value_or(-1), lane_connections);
  }
  into.reset();  // releases the buffer (with the GIL)
  guard.Reraise();
  return ValueOrThrow(std::move(r));
}

}  // namespace

void RegisterTransport(py::module_& m) {
  py::class_<TransferStats>(m, "TransferStats",
                            "One streamed frame: records, bytes and time (sender: Begin to ack; "
                            "receiver: Begin to End).")
      .def_readonly("transfer_id", &TransferStats::transfer_id)
      .def_readonly("records", &TransferStats::records)
      .def_readonly("frame_bytes", &TransferStats::frame_bytes)
      .def_readonly("wire_bytes", &TransferStats::wire_bytes)
      .def_readonly("busy_seconds", &TransferStats::busy_seconds)
      .def_readonly("elapsed_seconds", &TransferStats::elapsed_seconds)
      .def_property_readonly("goodput_gbps",
                             [](const TransferStats& s) {
                               const double t = s.busy_seconds > 0 ? s.busy_seconds : s.elapsed_seconds;
                               return t > 0 ? BytesPerSecondToGbps(static_cast<double>(s.frame_bytes) / t) : 0.0;
                             })
      .def("__repr__", [](const TransferStats& s) {
        return "TransferStats(transfer_id=" + std::to_string(s.transfer_id) +
               ", records=" + std::to_string(s.records) + ", frame_bytes=" +
               std::to_string(s.frame_bytes) + ", elapsed_seconds=" + std::to_string(s.elapsed_seconds) + ")";
      });

  py::class_<SharedLink, std::shared_ptr<SharedLink>>(
      m, "SharedLink",
      "One token bucket for every byte its connections write: the link of a host pair that "
      "concurrent transfers share (e.g. every prefill worker's decode connections).")
      .def(py::init([](double gbps, double burst_bytes) {
             return ValueOrThrow(SharedLink::Create(GbpsToBytesPerSecond(gbps), burst_bytes));
           }),
           py::arg("gbps"), py::arg("burst_bytes") = 0.0)
      .def_property_readonly("gbps", [](const SharedLink& l) { return BytesPerSecondToGbps(l.rate()); })
      .def("set_gbps", [](SharedLink& l, double gbps) {
             if (!(gbps > 0)) ThrowInvalid("gbps: must be > 0");
             l.SetRate(GbpsToBytesPerSecond(gbps));
           }, py::arg("gbps"))
      .def_property_readonly("bytes", &SharedLink::bytes, "bytes written through the link so far");

  py::class_<ConnectionOptions>(m, "ConnectionOptions")
      .def(py::init(&MakeOptions), py::arg("secret") = "", py::arg("local_id") = "kvserve",
           py::arg("shape_gbps") = 0.0, py::arg("io_timeout") = 30.0, py::arg("connect_timeout") = 5.0,
           py::arg("handshake_timeout") = 5.0, py::arg("max_message_bytes") = uint64_t{1} << 30,
           py::arg("estimator") = std::shared_ptr<BandwidthEstimator>())
      .def_property_readonly("local_id", [](const ConnectionOptions& o) { return o.local_id; })
      .def_property_readonly("shape_gbps",
                             [](const ConnectionOptions& o) { return BytesPerSecondToGbps(o.shape_bytes_per_second); })
      .def_property_readonly("io_timeout", [](const ConnectionOptions& o) { return o.io_timeout_seconds; })
      .def_property_readonly("authenticated", [](const ConnectionOptions& o) { return !o.secret.empty(); });

  py::class_<PyConnection>(m, "Connection")
      .def("send", &PyConnection::Send, py::arg("type"), py::arg("payload"), py::arg("flags") = 0)
      .def("receive", &PyConnection::Receive, py::arg("timeout") = py::none())
      .def("close", &PyConnection::Close)
      .def("fail", &PyConnection::Fail, py::arg("message"))
      .def("report_goodput",
           [](PyConnection& c, double bytes, double seconds) { c.get().ReportGoodput(bytes, seconds); },
           py::arg("bytes"), py::arg("seconds"))
      .def_property_readonly("peer_id", [](PyConnection& c) { return c.get().peer_id(); })
      .def_property_readonly("remote_address", [](PyConnection& c) { return c.get().remote_address(); })
      .def_property_readonly("stats", &PyConnection::Stats);

  py::class_<PyListener>(m, "Listener")
      .def_property_readonly("address", &PyListener::Address)
      .def("accept", &PyListener::Accept, py::arg("timeout"), py::arg("options"))
      .def("close", &PyListener::Close);

  py::class_<PyTransport>(m, "Transport")
      .def_property_readonly("kind", &PyTransport::kind)
      .def("listen", &PyTransport::Listen, py::arg("address"))
      .def("dial", &PyTransport::Dial, py::arg("address"), py::arg("options"));

  m.def(
      "tcp_transport",
      [] { return std::make_unique<PyTransport>(TransportPtr(NewTcpTransport()), "tcp"); },
      "kvserve's TCP transport (asio).");
  m.def(
      "ucx_transport",
      [](const std::string& tls, const std::string& net_devices, const std::string& secret) {
        UcxTransportOptions o;
        o.tls = tls;
        o.net_devices = net_devices;
        o.secret = secret;
        Result<std::unique_ptr<Transport>> t = Status::Internal("unset");
        {
          py::gil_scoped_release release;
          t = NewUcxTransport(o);
        }
        return std::make_unique<PyTransport>(TransportPtr(ValueOrThrow(std::move(t))), "ucx");
      },
      py::arg("tls") = "", py::arg("net_devices") = "", py::arg("secret") = "",
      "UCX active messages (docs/transport.md §UCX); IOError when UCX cannot start.");

  py::class_<PyFrameSender>(m, "FrameSender")
      .def(py::init<PyConnection&, const py::object&>(), py::arg("connection"), py::arg("lanes") = py::none(),
           py::keep_alive<1, 2>(), py::keep_alive<1, 3>())
      .def("begin", &PyFrameSender::Begin, py::arg("transfer_id"), py::arg("header"))
      .def("send_record", &PyFrameSender::SendRecord, py::arg("record"))
      .def("write", &PyFrameSender::Write, py::arg("transfer_id"), py::arg("data"))
      .def("finish", &PyFrameSender::Finish)
      .def("abort", &PyFrameSender::Abort, py::arg("reason"));

  m.def("receive_frame", &ReceiveFrameFromPython, py::arg("connection"), py::arg("on_header"),
        py::arg("on_record"), py::arg("timeout") = py::none(), py::arg("lanes") = py::none());
}

}  // namespace kvserve::python
