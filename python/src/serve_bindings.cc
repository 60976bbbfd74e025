// Copyright kvserve authors. The serving workers from Python (kvserve/serve.h,
// kvserve/engine.h): a Python object is the engine (a transformers model:
// kvserve.integration.transformers), the library's prefill and decode
// workers do the rest -- protocol, controller, transfers (the connector's
// device paths for a GPU engine, kvserve/connector.h), retries, the pool.
//
// Threads: the workers call the engine from their own threads, taking the
// GIL for the call only; the engine's forward hooks hand each layer to the
// connector, which encodes and sends it on threads that never take the GIL.
// Every blocking call from Python (serve, submit, stop) releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "kvserve/codec.h"
#include "kvserve/connector.h"
#include "kvserve/engine.h"
#include "kvserve/serve.h"
#include "tensor.h"
#ifdef KVSERVE_PY_CUDA
#include "kvserve/cuda.h"
#endif

namespace kvserve::python {
namespace py = pybind11;

namespace {

// Tokens per block of the pages a prefill's per-layer tensors are read as
// (prefix-pool chunks are sliced at multiples of it).
constexpr int kLayerBlock = 16;

Status ErrorOf(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (py::error_already_set& error) {
    return StatusFromPython(error);
  } catch (const StatusError& error) {
    return error.status;
  } catch (const std::exception& error) {
    return Status::Internal(error.what());
  }
}

// A request's KV held by a Python engine: its tensors (kept alive), read
// as one strided view (a 5-D tensor) or as pages over per-layer (K, V)
// tensors (a prefill's cache).
class PyEngineKv final : public EngineKv {
 public:
  PyEngineKv(Memory memory, intptr_t stream) : memory_(memory), stream_(stream) {}
  ~PyEngineKv() override {
    py::gil_scoped_acquire gil;
    refs_.clear();
    object_ = py::object();
  }

  // Layer `layer` handed over by the engine's forward hook: its K and V,
  // (kv_heads, tokens, head_dim) or (1, kv_heads, tokens, head_dim), with
  // equal strides and head_dim contiguous. Returns that layer's view and
  // keeps the tensors. GIL held.
  KvView AddLayer(int layer, py::handle k, py::handle v) {
    if (layer != static_cast<int>(keys_.size()))
      ThrowInvalid("engine hook: layer " + std::to_string(layer) + " handed over after " +
                   std::to_string(keys_.size()) + " layers");
    TensorRef kr = ImportTensor(k, false, std::nullopt, "layer " + std::to_string(layer) + " K", memory_, stream_);
    TensorRef vr = ImportTensor(v, false, std::nullopt, "layer " + std::to_string(layer) + " V", memory_, stream_);
    auto last3 = [](const TensorRef& r, const char* what) {
      if (!(r.ndim() == 3 || (r.ndim() == 4 && r.shape[0] == 1)))
        ThrowInvalid(std::string("engine hook: layer ") + what + " must be (kv_heads, tokens, head_dim) or "
                     "(1, kv_heads, tokens, head_dim)");
      const int o = r.ndim() - 3;
      return std::array<int64_t, 6>{r.shape[o], r.shape[o + 1], r.shape[o + 2],
                                    r.strides[o], r.strides[o + 1], r.strides[o + 2]};
    };
    const auto ks = last3(kr, "K"), vs = last3(vr, "V");
    if (ks != vs || kr.dtype != vr.dtype) ThrowInvalid("engine hook: a layer's K and V differ in shape, strides or dtype");
    if (ks[5] != 1) ThrowInvalid("engine hook: head_dim must be contiguous");
    if (layer == 0) {
      dtype_ = kr.dtype;
      head_stride_ = ks[3];
      token_stride_ = ks[4];
      shape_ = KvShape{0, static_cast<int>(ks[0]), static_cast<int>(ks[1]), static_cast<int>(ks[2])};
    } else if (ks[3] != head_stride_ || ks[4] != token_stride_ || kr.dtype != dtype_ ||
               ks[0] != shape_.kv_heads || ks[1] != shape_.tokens || ks[2] != shape_.head_dim) {
      ThrowInvalid("engine hook: layer " + std::to_string(layer) + " differs from layer 0 in shape or strides");
    }
    KvView view;
    view.data = kr.data;
    view.dtype = kr.dtype;
    view.shape = KvShape{1, shape_.kv_heads, shape_.tokens, shape_.head_dim};
    view.strides.layer = 0;
    view.strides.kind = (static_cast<const std::byte*>(vr.data) - static_cast<const std::byte*>(kr.data)) /
                        static_cast<int64_t>(DTypeSize(kr.dtype));
    view.strides.head = head_stride_;
    view.strides.token = token_stride_;
    view.strides.dim = 1;
    keys_.push_back(kr.data);
    values_.push_back(vr.data);
    refs_.push_back(std::move(kr));
    refs_.push_back(std::move(vr));
    return view;
  }

  // After the last layer: the whole cache as pages of kLayerBlock tokens.
  void FinishLayers() {
    if (keys_.empty()) ThrowInvalid("the engine's prefill handed over no layer");
    shape_.layers = static_cast<int>(keys_.size());
    const int block = std::min(kLayerBlock, shape_.tokens);
    table_.resize((shape_.tokens + block - 1) / block);
    for (size_t i = 0; i < table_.size(); ++i) table_[i] = static_cast<int32_t>(i);
    PagedKvView p;
    p.dtype = dtype_;
    p.shape = shape_;
    p.block_size = block;
    p.num_blocks = static_cast<int32_t>(table_.size());
    p.strides = PagedStrides{block * token_stride_, token_stride_, head_stride_};
    p.key_pages = keys_.data();
    p.value_pages = values_.data();
    p.block_table = table_.data();
    source_ = p;
  }

  // A 5-D (layers, 2, kv_heads, tokens, head_dim) tensor the engine
  // allocated for a frame. GIL held.
  void SetWhole(py::object tensor, const KvShape& shape, DType dtype) {
    TensorRef r = ImportTensor(tensor, true, dtype, "allocate_kv's tensor", memory_, stream_);
    if (r.ndim() != 5 || r.shape[0] != shape.layers || r.shape[1] != 2 || r.shape[2] != shape.kv_heads ||
        r.shape[3] != shape.tokens || r.shape[4] != shape.head_dim)
      ThrowInvalid("allocate_kv must return a (layers, 2, kv_heads, tokens, head_dim) tensor of the frame's shape");
    dest_ = MutableKvView{r.data, dtype, shape, KvStrides{r.strides[0], r.strides[1], r.strides[2], r.strides[3],
                                                           r.strides[4]}};
    shape_ = shape;
    dtype_ = dtype;
    source_ = dest_->AsConst();
    refs_.push_back(std::move(r));
    object_ = std::move(tensor);
  }

  KvShape shape() const override { return shape_; }
  DType dtype() const override { return dtype_; }
  DeviceKvSource view() const override { return source_; }
  KvDestination destination() override { return *dest_; }
  // The Python object Generate hands back to the engine.
  py::object object() const { return object_; }

 private:
  Memory memory_;
  intptr_t stream_;
  std::vector<TensorRef> refs_;
  py::object object_;
  DType dtype_ = DType::kBF16;
  KvShape shape_;
  int64_t head_stride_ = 0, token_stride_ = 0;
  std::vector<const void*> keys_, values_;
  std::vector<int32_t> table_;
  DeviceKvSource source_;
  std::optional<MutableKvView> dest_;
};

// A Python object as the engine. Its methods:
//   info() -> dict(name, layers, kv_heads, head_dim, vocab_size, kv_dtype,
//                  device (-1 = host), stream (cudaStream_t as int))
//   prefill(prompt: list[int], on_layer) -> last_logits (float32 host
//       sequence); calls on_layer(l, k, v) in the forward hook of layer l
//   allocate_kv(shape: (layers, kv_heads, tokens, head_dim), dtype: str)
//       -> 5-D tensor (layers, 2, kv_heads, tokens, head_dim)
//   generate(parts, keep_masks, prompt, suffix, last_logits, max_new_tokens,
//            temperature, top_p, seed, stop_at_eos)
//       -> (tokens: list[int], first_token_seconds: float)
class PyServingEngine final : public ServingEngine {
 public:
  explicit PyServingEngine(py::object engine) : engine_(std::move(engine)) {
    py::dict d = engine_.attr("info")();
    info_.name = d.contains("name") ? d["name"].cast<std::string>() : "python engine";
    info_.layers = d["layers"].cast<int>();
    info_.kv_heads = d["kv_heads"].cast<int>();
    info_.head_dim = d["head_dim"].cast<int>();
    info_.vocab_size = d["vocab_size"].cast<int>();
    const std::optional<DType> dtype = DTypeFromPython(d["kv_dtype"]);
    if (!dtype) ThrowInvalid("engine info: kv_dtype is required");
    info_.kv_dtype = *dtype;
    info_.device = d.contains("device") ? d["device"].cast<int>() : -1;
    stream_ = d.contains("stream") ? d["stream"].cast<intptr_t>() : 0;
    if (info_.layers <= 0 || info_.kv_heads <= 0 || info_.head_dim <= 0 || info_.vocab_size <= 0)
      ThrowInvalid("engine info: layers, kv_heads, head_dim and vocab_size must be positive");
  }
  ~PyServingEngine() override {
    py::gil_scoped_acquire gil;
    engine_ = py::object();
  }

  const EngineInfo& info() const override { return info_; }
  void* stream() const override { return reinterpret_cast<void*>(stream_); }

  Result<EnginePrefill> Prefill(std::span<const int32_t> prompt, const LayerReadyCallback& on_layer) override {
    py::gil_scoped_acquire gil;
    try {
      auto kv = std::make_unique<PyEngineKv>(memory(), stream_);
      PyEngineKv* raw = kv.get();
      py::cpp_function hook([raw, &on_layer](int layer, py::object k, py::object v) {
        const KvView view = raw->AddLayer(layer, k, v);
        py::gil_scoped_release nogil;  // the connector may copy (host) or signal (device)
        on_layer(layer, view);
      });
      py::object logits = engine_.attr("prefill")(std::vector<int32_t>(prompt.begin(), prompt.end()), hook);
      raw->FinishLayers();
      EnginePrefill out;
      const auto array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(logits);
      if (!array || array.ndim() != 1)
        ThrowInvalid("the engine's prefill must return the last token's logits as a 1-D float array");
      out.last_logits.assign(array.data(), array.data() + array.size());
      out.kv = std::move(kv);
      return out;
    } catch (...) {
      return ErrorOf(std::current_exception()).WithContext("engine prefill");
    }
  }

  Result<std::unique_ptr<EngineKv>> AllocateKv(const KvShape& shape, DType dtype) override {
    py::gil_scoped_acquire gil;
    try {
      auto kv = std::make_unique<PyEngineKv>(memory(), stream_);
      py::object t = engine_.attr("allocate_kv")(py::make_tuple(shape.layers, shape.kv_heads, shape.tokens,
                                                               shape.head_dim),
                                                std::string(DTypeName(dtype)));
      kv->SetWhole(std::move(t), shape, dtype);
      return std::unique_ptr<EngineKv>(std::move(kv));
    } catch (...) {
      return ErrorOf(std::current_exception()).WithContext("engine allocate_kv");
    }
  }

  Result<EngineTokens> Generate(std::vector<std::unique_ptr<EngineKv>> parts,
                                const std::vector<std::vector<uint8_t>>& keep_masks,
                                const EngineGenerate& r) override {
    py::gil_scoped_acquire gil;
    try {
      py::list objects, masks;
      for (const auto& p : parts) objects.append(static_cast<const PyEngineKv&>(*p).object());
      for (const auto& m : keep_masks)
        masks.append(py::bytes(reinterpret_cast<const char*>(m.data()), m.size()));
      py::array_t<float> logits(static_cast<py::ssize_t>(r.last_logits.size()), r.last_logits.data());
      py::tuple out = engine_.attr("generate")(objects, masks, r.prompt, r.suffix, logits, r.max_new_tokens,
                                               r.sampling.temperature, r.sampling.top_p, r.sampling.seed,
                                               r.stop_at_eos);
      EngineTokens tokens;
      tokens.tokens = out[0].cast<std::vector<int32_t>>();
      tokens.first_token_seconds = out[1].cast<double>();
      parts.clear();  // under the GIL
      return tokens;
    } catch (...) {
      return ErrorOf(std::current_exception()).WithContext("engine generate");
    }
  }

 private:
  Memory memory() const { return info_.device >= 0 ? Memory::kCuda : Memory::kHost; }

  py::object engine_;
  EngineInfo info_;
  intptr_t stream_ = 0;
};

// The connector's device paths (CUDA builds), shared by the workers of a
// process.
class PyDeviceConnector {
 public:
  explicit PyDeviceConnector(std::unique_ptr<DeviceConnector> connector) : connector_(std::move(connector)) {}
  DeviceConnector* get() const { return connector_.get(); }
  py::dict Memory() const {
    const DeviceMemoryStats m = connector_->memory();
    py::dict d;
    d["bytes_now"] = m.bytes_now;
    d["peak_bytes"] = m.peak_bytes;
    d["peak_transfer_bytes"] = m.peak_transfer_bytes;
    return d;
  }

 private:
  std::unique_ptr<DeviceConnector> connector_;
};

DeviceConnector* ConnectorOf(py::handle device) {
  if (device.is_none()) return nullptr;
  return device.cast<const PyDeviceConnector&>().get();
}

ServeRequest RequestFromDict(const py::dict& d) {
  ServeRequest r;
  r.id = d["id"].cast<uint64_t>();
  r.prompt = d["prompt"].cast<std::vector<int32_t>>();
  if (d.contains("max_new_tokens")) r.max_new_tokens = d["max_new_tokens"].cast<int>();
  if (d.contains("method")) r.method = d["method"].cast<std::string>();
  if (d.contains("workload")) r.workload = d["workload"].cast<std::string>();
  if (d.contains("slo_seconds")) r.slo_seconds = d["slo_seconds"].cast<double>();
  if (d.contains("quality_min")) r.quality_min = d["quality_min"].cast<double>();
  if (d.contains("use_pool")) r.use_pool = d["use_pool"].cast<bool>();
  if (d.contains("store_before_reply")) r.store_before_reply = d["store_before_reply"].cast<bool>();
  if (d.contains("temperature")) r.sampling.temperature = d["temperature"].cast<float>();
  if (d.contains("top_p")) r.sampling.top_p = d["top_p"].cast<float>();
  if (d.contains("seed")) r.sampling.seed = d["seed"].cast<uint64_t>();
  if (d.contains("stop_at_eos")) r.stop_at_eos = d["stop_at_eos"].cast<bool>();
  return r;
}

py::dict ResponseToDict(const ServeResponse& response) {
  const RequestTimings& t = response.timings;
  py::dict d;
  d["id"] = response.id;
  d["ok"] = response.status.ok();
  d["error"] = response.status.ok() ? std::string() : response.status.ToString();
  d["code"] = std::string(StatusCodeName(response.status.code()));
  d["tokens"] = response.tokens;
  py::dict tm;
  tm["prefill_seconds"] = t.prefill_seconds;
  tm["encode_seconds"] = t.encode_seconds;
  tm["transfer_seconds"] = t.transfer_seconds;
  tm["decode_kv_seconds"] = t.decode_kv_seconds;
  tm["generation_seconds"] = t.generation_seconds;
  tm["kv_seconds"] = t.kv_seconds;
  tm["pool_fetch_seconds"] = t.pool_fetch_seconds;
  tm["pool_wait_seconds"] = t.pool_wait_seconds;
  tm["queue_seconds"] = t.queue_seconds;
  tm["after_first_token_seconds"] = t.after_first_token_seconds;
  tm["ttft_seconds"] = t.ttft_seconds;
  tm["jct_seconds"] = t.jct_seconds;
  tm["kv_bytes"] = t.kv_bytes;
  tm["frame_bytes"] = t.frame_bytes;
  tm["bandwidth_estimate"] = t.bandwidth_estimate;
  tm["link_bytes_per_second"] = t.link_bytes_per_second;
  tm["link_transfers"] = t.link_transfers;
  tm["predicted_kv_seconds"] = t.predicted_kv_seconds;
  tm["profile"] = t.profile;
  tm["explored"] = t.explored;
  tm["feasible"] = t.feasible;
  tm["prefix_hit"] = t.prefix_hit;
  tm["recomputed"] = t.recomputed;
  tm["attempts"] = t.attempts;
  tm["prefix_chunks"] = t.prefix_chunks;
  tm["hit_error"] = t.hit_error;
  d["timings"] = tm;
  return d;
}

// A worker and what it needs alive: its transport, engine and connector.
template <typename Worker>
class PyWorker {
 public:
  PyWorker(std::unique_ptr<Transport> transport, std::unique_ptr<PyServingEngine> engine, py::object keep)
      : transport_(std::move(transport)), engine_(std::move(engine)), keep_(std::move(keep)) {}
  ~PyWorker() {
    // Stopping joins threads that may wait for the GIL inside the engine.
    py::gil_scoped_release release;
    worker_.reset();
    engine_.reset();
  }
  void Stop() {
    py::gil_scoped_release release;
    if (worker_) worker_->Stop();
  }
  std::string address() const { return worker_->address(); }

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<PyServingEngine> engine_;
  py::object keep_;  // the Python engine and the device connector
  std::unique_ptr<Worker> worker_;
};

using PyDecodeWorker = PyWorker<DecodeWorker>;
using PyPrefillWorker = PyWorker<PrefillWorker>;

ConnectionOptions Connection(const std::string& secret, double shape_bytes_per_second = 0) {
  ConnectionOptions o;
  o.secret = secret;
  o.shape_bytes_per_second = shape_bytes_per_second;
  return o;
}

}  // namespace

void RegisterServe(py::module_& m) {
  py::class_<PyDeviceConnector>(m, "DeviceConnector",
                                "The connector's GPU paths: KV encoded and decoded on the device window by window "
                                "through a bounded ring (kvserve/connector.h).")
      .def("memory", &PyDeviceConnector::Memory,
           "Device bytes the connector's rings hold now, at most so far, and at most for one transfer.");
  m.def(
      "device_connector",
      [](int device, uint64_t device_budget_bytes, uint64_t pinned_budget_bytes, int max_slots) -> py::object {
#ifdef KVSERVE_PY_CUDA
        DeviceConnectorOptions o;
        o.device = device;
        o.device_budget_bytes = device_budget_bytes;
        o.pinned_budget_bytes = pinned_budget_bytes;
        o.max_slots = max_slots;
        return py::cast(std::make_unique<PyDeviceConnector>(ValueOrThrow(cuda::NewDeviceConnector(o))));
#else
        (void)device, (void)device_budget_bytes, (void)pinned_budget_bytes, (void)max_slots;
        ThrowNotSupported("this kvserve build has no CUDA codec: the device connector needs one");
#endif
      },
      py::arg("device") = 0, py::arg("device_budget_bytes") = uint64_t{64} << 20,
      py::arg("pinned_budget_bytes") = uint64_t{64} << 20, py::arg("max_slots") = 4);

  py::class_<PyDecodeWorker>(m, "DecodeWorker", "The library's decode worker around a Python engine.")
      .def(py::init([](py::object engine, const std::string& listen, const std::string& secret,
                       uint64_t max_kv_bytes, int decode_threads, py::object device, py::object pool) {
             auto py_engine = std::make_unique<PyServingEngine>(engine);
             auto w = std::make_unique<PyDecodeWorker>(NewTcpTransport(), std::move(py_engine),
                                                       py::make_tuple(engine, device, pool));
             DecodeWorkerOptions o;
             o.listen_address = listen;
             o.connection = Connection(secret);
             o.max_kv_bytes = max_kv_bytes;
             o.decode_threads = decode_threads;
             o.device = ConnectorOf(device);
             o.pool = pool.is_none() ? nullptr : PoolFromPython(pool);
             Result<std::unique_ptr<DecodeWorker>> started = Status::Internal("unset");
             {
               py::gil_scoped_release release;
               started = DecodeWorker::Start(w->transport_.get(), w->engine_.get(), o);
             }
             w->worker_ = ValueOrThrow(std::move(started));
             return w;
           }),
           py::arg("engine"), py::arg("listen") = "127.0.0.1:0", py::arg("secret") = "",
           py::arg("max_kv_bytes") = uint64_t{64} << 30, py::arg("decode_threads") = 1, py::arg("device") = py::none(),
           py::arg("pool") = py::none())
      .def_property_readonly("address", &PyDecodeWorker::address)
      .def_property_readonly("completed", [](const PyDecodeWorker& w) { return w.worker_->completed(); })
      .def_property_readonly("refused_frames", [](const PyDecodeWorker& w) { return w.worker_->refused_frames(); })
      .def("stop", &PyDecodeWorker::Stop);

  py::class_<PyPrefillWorker>(m, "PrefillWorker", "The library's prefill worker around a Python engine.")
      .def(py::init([](py::object engine, const ProfileTable& table, std::vector<std::string> decode_addresses,
                       const std::string& listen, const std::string& secret, double link_bytes_per_second,
                       const std::string& model_id, bool overlap_prefill, py::object pool,
                       std::vector<std::string> pool_store_profiles, int pool_chunk_tokens,
                       std::shared_ptr<HeadScores> head_scores, const std::string& default_workload,
                       int table_reference_tokens, const std::string& latency_model, double epsilon,
                       bool bandit, double prefill_seconds_per_token_prior, py::object device,
                       std::shared_ptr<SharedLink> shared_link, int max_decode_connections) {
             auto py_engine = std::make_unique<PyServingEngine>(engine);
             auto w = std::make_unique<PyPrefillWorker>(NewTcpTransport(), std::move(py_engine),
                                                        py::make_tuple(engine, device, pool, head_scores));
             PrefillWorkerOptions o;
             o.listen_address = listen;
             o.decode_addresses = std::move(decode_addresses);
             o.client_connection = Connection(secret);
             o.decode_connection = Connection(secret, link_bytes_per_second);
             o.decode_connection.shared_link = std::move(shared_link);
             o.model_id = model_id;
             o.overlap_prefill = overlap_prefill;
             o.pool = pool.is_none() ? nullptr : PoolFromPython(pool);
             o.pool_store_profiles = std::move(pool_store_profiles);
             o.pool_chunk_tokens = pool_chunk_tokens;
             o.head_scores = head_scores.get();
             o.default_workload = default_workload;
             o.table_reference_tokens = table_reference_tokens;
             if (latency_model != "streamed" && latency_model != "serial")
               ThrowInvalid("latency_model: 'streamed' or 'serial', not '" + latency_model + "'");
             o.controller.model.kind =
                 latency_model == "streamed" ? LatencyModelKind::kStreamed : LatencyModelKind::kSerial;
             o.controller.epsilon = epsilon;
             o.controller.bandit = bandit;
             o.prefill_seconds_per_token_prior = prefill_seconds_per_token_prior;
             o.device = ConnectorOf(device);
             o.max_decode_connections = max_decode_connections;
             Result<std::unique_ptr<PrefillWorker>> started = Status::Internal("unset");
             {
               py::gil_scoped_release release;
               started = PrefillWorker::Start(w->transport_.get(), w->engine_.get(), table, o);
             }
             w->worker_ = ValueOrThrow(std::move(started));
             return w;
           }),
           py::arg("engine"), py::arg("table"), py::arg("decode_addresses"), py::arg("listen") = "127.0.0.1:0",
           py::arg("secret") = "", py::arg("link_bytes_per_second") = 0.0, py::arg("model_id") = "model",
           py::arg("overlap_prefill") = true, py::arg("pool") = py::none(),
           py::arg("pool_store_profiles") = std::vector<std::string>{}, py::arg("pool_chunk_tokens") = 128,
           py::arg("head_scores") = nullptr, py::arg("default_workload") = "", py::arg("table_reference_tokens") = 512,
           py::arg("latency_model") = "streamed", py::arg("epsilon") = 0.05, py::arg("bandit") = true,
           py::arg("prefill_seconds_per_token_prior") = 1e-4, py::arg("device") = py::none(),
           py::arg("shared_link") = std::shared_ptr<SharedLink>(),
           py::arg("max_decode_connections") = PrefillWorkerOptions{}.max_decode_connections)
      .def_property_readonly("address", &PyPrefillWorker::address)
      .def(
          "serve",
          [](PyPrefillWorker& w, const py::dict& request) {
            const ServeRequest r = RequestFromDict(request);
            ServeResponse response;
            {
              py::gil_scoped_release release;
              const double start = MonotonicSeconds();
              response = w.worker_->Serve(r);
              response.timings.jct_seconds = MonotonicSeconds() - start;
              // As a client connection's handler once the response is out.
              w.worker_->StorePending();
            }
            return ResponseToDict(response);
          },
          py::arg("request"), "Serves one request in this thread (as a client connection would); returns the response.")
      .def(
          "set_link_rate",
          [](PyPrefillWorker& w, double bytes_per_second) {
            py::gil_scoped_release release;
            w.worker_->SetLinkRate(bytes_per_second);
          },
          py::arg("bytes_per_second"))
      .def_property_readonly("bandwidth_estimate",
                             [](const PyPrefillWorker& w) { return w.worker_->BandwidthEstimate(); })
      .def_property_readonly("table", [](const PyPrefillWorker& w) { return w.worker_->table(); })
      .def("stop", &PyPrefillWorker::Stop);

  py::class_<ServeClient>(m, "ServeClient", "Submits requests to prefill workers (one request at a time).")
      .def(py::init([](std::vector<std::string> addresses, const std::string& secret, int max_attempts,
                       double timeout) {
             static std::unique_ptr<Transport> tcp = NewTcpTransport();  // shared by every client
             ServeClientOptions o;
             o.prefill_addresses = std::move(addresses);
             o.connection = Connection(secret);
             o.max_attempts = max_attempts;
             o.response_timeout_seconds = timeout;
             return std::make_unique<ServeClient>(tcp.get(), o);
           }),
           py::arg("addresses"), py::arg("secret") = "", py::arg("max_attempts") = 3, py::arg("timeout") = 600.0)
      .def(
          "submit",
          [](ServeClient& c, const py::dict& request) {
            const ServeRequest r = RequestFromDict(request);
            Result<ServeResponse> response = Status::Internal("unset");
            {
              py::gil_scoped_release release;
              response = c.Submit(r);
            }
            return ResponseToDict(ValueOrThrow(std::move(response)));
          },
          py::arg("request"));
}

}  // namespace kvserve::python
