// Copyright kvserve authors. The KV pool from Python (include/kvserve/pool.h):
// the embedded in-memory pool, a client of `kvserve pool serve` and a pool
// server, with the prefix hash the serving workers key entries by. Every
// call that can block releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "held_bytes.h"
#include "kvserve/pool.h"
#include "kvserve/transport.h"

namespace kvserve::python {
namespace py = pybind11;

namespace {

// A KvPool and what it needs alive (the client's transport).
class PyPool {
 public:
  PyPool(std::unique_ptr<Transport> transport, std::unique_ptr<KvPool> pool)
      : transport_(std::move(transport)), pool_(std::move(pool)) {}

  KvPool& get() { return *pool_; }

  void Put(const std::string& model, uint64_t hash, const std::string& profile, py::handle frame) {
    HeldBytes bytes(frame, "frame");
    Status s;
    {
      py::gil_scoped_release release;
      s = pool_->Put({model, hash, profile}, bytes.span());
    }
    ThrowIfError(s);
  }

  // The value, or None when absent (NotFound); other errors raise.
  py::object Get(const std::string& model, uint64_t hash, const std::string& profile) {
    std::vector<uint8_t> frame;
    Status s;
    {
      py::gil_scoped_release release;
      s = pool_->Get({model, hash, profile}, &frame);
    }
    if (s.code() == StatusCode::kNotFound) return py::none();
    ThrowIfError(s);
    return py::bytes(reinterpret_cast<const char*>(frame.data()), frame.size());
  }

  bool Delete(const std::string& model, uint64_t hash, const std::string& profile) {
    Status s;
    {
      py::gil_scoped_release release;
      s = pool_->Delete({model, hash, profile});
    }
    if (s.code() == StatusCode::kNotFound) return false;
    ThrowIfError(s);
    return true;
  }

  std::vector<std::pair<std::string, uint64_t>> Lookup(const std::string& model, uint64_t hash) {
    Result<std::vector<PoolEntryInfo>> r = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      r = pool_->Lookup(model, hash);
    }
    std::vector<std::pair<std::string, uint64_t>> out;
    for (const PoolEntryInfo& e : ValueOrThrow(std::move(r))) out.emplace_back(e.profile, e.bytes);
    return out;
  }

  py::dict Stats() {
    Result<PoolStats> r = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      r = pool_->Stats();
    }
    const PoolStats s = ValueOrThrow(std::move(r));
    py::dict d;
    d["entries"] = s.entries;
    d["bytes"] = s.bytes;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["evictions"] = s.evictions;
    return d;
  }

 private:
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<KvPool> pool_;
};

// A PoolServer over its own TCP transport, serving a PyPool (kept alive by
// the Python reference, py::keep_alive).
class PyPoolServer {
 public:
  PyPoolServer(PyPool& pool, const std::string& listen, const ConnectionOptions& options)
      : transport_(NewTcpTransport()) {
    PoolServerOptions o;
    o.listen_address = listen;
    o.connection = options;
    Result<std::unique_ptr<PoolServer>> r = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      r = PoolServer::Start(transport_.get(), &pool.get(), std::move(o));
    }
    server_ = ValueOrThrow(std::move(r));
  }
  ~PyPoolServer() { Stop(); }

  std::string address() const { return server_ ? server_->address() : std::string(); }
  void Stop() {
    if (!server_) return;
    py::gil_scoped_release release;
    server_->Stop();
    server_.reset();
  }

 private:
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<PoolServer> server_;
};

}  // namespace

KvPool* PoolFromPython(py::handle pool) { return &pool.cast<PyPool&>().get(); }

void RegisterPool(py::module_& m) {
  m.def("prefix_hash", [](const std::vector<int32_t>& tokens) { return PrefixHash(tokens); },
        py::arg("tokens"), "XXH3-64 of the token ids as little-endian int32: the pool's prefix hash.");

  py::class_<PyPool>(m, "KvPool", "A KV pool: frames stored by (model id, prefix hash, profile).")
      .def("put", &PyPool::Put, py::arg("model_id"), py::arg("prefix_hash"), py::arg("profile"),
           py::arg("frame"))
      .def("get", &PyPool::Get, py::arg("model_id"), py::arg("prefix_hash"), py::arg("profile"))
      .def("delete", &PyPool::Delete, py::arg("model_id"), py::arg("prefix_hash"), py::arg("profile"))
      .def("lookup", &PyPool::Lookup, py::arg("model_id"), py::arg("prefix_hash"))
      .def("stats", &PyPool::Stats);

  m.def("memory_pool", [](uint64_t budget_bytes) {
          if (budget_bytes == 0) ThrowInvalid("budget_bytes: must be > 0");
          return std::make_unique<PyPool>(nullptr, NewMemoryPool({.budget_bytes = budget_bytes}));
        }, py::arg("budget_bytes") = uint64_t{1} << 30);
  m.def("redis_pool", [](const std::string& host, int port, const std::string& password, int database,
                         const std::string& key_prefix, int reconnect_attempts) {
          if (port < 1 || port > 65535) ThrowInvalid("port: must be in [1, 65535]");
          if (reconnect_attempts < 0) ThrowInvalid("reconnect_attempts: must be >= 0");
          RedisPoolOptions o;
          o.host = host;
          o.port = port;
          o.password = password;
          o.database = database;
          o.key_prefix = key_prefix;
          o.reconnect_attempts = reconnect_attempts;
          Result<std::unique_ptr<KvPool>> pool = Status::Internal("unset");
          {
            py::gil_scoped_release release;
            pool = NewRedisPool(std::move(o));
          }
          return std::make_unique<PyPool>(nullptr, ValueOrThrow(std::move(pool)));
        }, py::arg("host") = "127.0.0.1", py::arg("port") = 6379, py::arg("password") = "",
        py::arg("database") = 0, py::arg("key_prefix") = "kvserve", py::arg("reconnect_attempts") = 5);
  m.def("remote_pool", [](const std::string& address, const ConnectionOptions& options, int reconnect_attempts) {
          if (reconnect_attempts < 0) ThrowInvalid("reconnect_attempts: must be >= 0");
          auto transport = NewTcpTransport();
          RemotePoolOptions o;
          o.address = address;
          o.connection = options;
          o.reconnect_attempts = reconnect_attempts;
          auto pool = NewRemotePool(transport.get(), std::move(o));
          return std::make_unique<PyPool>(std::move(transport), std::move(pool));
        }, py::arg("address"), py::arg("options"), py::arg("reconnect_attempts") = 2);

  py::class_<PyPoolServer>(m, "PoolServer", "Serves a KvPool over kvserve's authenticated TCP transport.")
      .def(py::init<PyPool&, const std::string&, const ConnectionOptions&>(), py::arg("pool"),
           py::arg("listen"), py::arg("options"), py::keep_alive<1, 2>())
      .def_property_readonly("address", &PyPoolServer::address)
      .def("stop", &PyPoolServer::Stop);
}

}  // namespace kvserve::python
