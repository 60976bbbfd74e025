// Copyright kvserve authors. The connector's device paths
// (kvserve/connector.h DeviceConnector) on the CUDA backend: a frame is
// encoded or decoded window by window (kvserve/cuda.h WindowedEncoder /
// WindowedDecoder) through a ring of slots, each a device buffer plus its
// pinned host side ([status | plan tables | bytes]).
//
// Sending: the calling thread waits for each layer (the producer's gate and
// the engine stream's event), launches each of its windows into a free slot
// on the ring's stream and queues the slot; a sender thread waits for the
// slot's event, reads its status block, copies a rans window's bytes (pack
// windows came with the kernels' stream), writes them to the wire and frees
// the slot. Receiving: records are read from the wire straight into the
// pinned side of the slot their window occupies; a complete window is
// copied to the device and decoded there, and its slot is reused once the
// decode is done and its status is clean.
#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include "connector/layer_gate.h"
#include "kvserve/connector.h"
#include "kvserve/cuda.h"

namespace kvserve::cuda {
namespace {

constexpr uint64_t kAlign = 256;
uint64_t Align(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

Status Cuda(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return Status::ResourceExhausted(what + ": out of device memory");
  }
  return Status::Internal(what + ": " + cudaGetErrorString(e));
}

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

// A ring's memory and CUDA objects: one device block and one pinned block
// (carved into slots per transfer), a stream for the codec, one for rans
// copies, and events.
class Ring {
 public:
  ~Ring() {
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    if (copy_ != nullptr) (void)cudaStreamDestroy(copy_);
    (void)cudaFree(device_);
    (void)cudaFreeHost(pinned_);
  }

  Status Init(uint64_t device_bytes, uint64_t pinned_bytes, int max_slots) {
    device_bytes_ = device_bytes;
    pinned_bytes_ = pinned_bytes;
    KVSERVE_RETURN_IF_ERROR(Cuda(cudaMalloc(reinterpret_cast<void**>(&device_), device_bytes),
                                 "allocating the connector's device ring of " + std::to_string(device_bytes) +
                                     " bytes"));
    KVSERVE_RETURN_IF_ERROR(Cuda(cudaMallocHost(reinterpret_cast<void**>(&pinned_), pinned_bytes),
                                 "allocating the connector's pinned ring of " + std::to_string(pinned_bytes) +
                                     " bytes"));
    KVSERVE_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    KVSERVE_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "cudaStreamCreate"));
    // Per slot: done (no timing), start and end (timing).
    for (int i = 0; i < max_slots; ++i) {
      KVSERVE_ASSIGN_OR_RETURN(cudaEvent_t d, NewEvent(false));
      KVSERVE_ASSIGN_OR_RETURN(cudaEvent_t a, NewEvent(true));
      KVSERVE_ASSIGN_OR_RETURN(cudaEvent_t b, NewEvent(true));
      done_.push_back(d);
      start_.push_back(a);
      end_.push_back(b);
    }
    return Status::Ok();
  }

  // Events marking when each layer of a transfer is ready on the engine's
  // stream (grown on demand, reused across transfers).
  Result<cudaEvent_t> LayerEvent(int layer) {
    while (static_cast<int>(layers_.size()) <= layer) {
      KVSERVE_ASSIGN_OR_RETURN(cudaEvent_t e, NewEvent(false));
      layers_.push_back(e);
    }
    return layers_[layer];
  }

  uint8_t* device() const { return device_; }
  uint8_t* pinned() const { return pinned_; }
  uint64_t device_bytes() const { return device_bytes_; }
  uint64_t pinned_bytes() const { return pinned_bytes_; }
  cudaStream_t stream() const { return stream_; }
  cudaStream_t copy() const { return copy_; }
  cudaEvent_t done(int i) const { return done_[i]; }
  cudaEvent_t start(int i) const { return start_[i]; }
  cudaEvent_t end(int i) const { return end_[i]; }
  int max_slots() const { return static_cast<int>(done_.size()); }

 private:
  Result<cudaEvent_t> NewEvent(bool timing) {
    cudaEvent_t e = nullptr;
    KVSERVE_RETURN_IF_ERROR(
        Cuda(cudaEventCreateWithFlags(&e, timing ? 0u : static_cast<unsigned>(cudaEventDisableTiming)),
             "cudaEventCreate"));
    events_.push_back(e);
    return e;
  }

  uint8_t* device_ = nullptr;
  uint8_t* pinned_ = nullptr;
  uint64_t device_bytes_ = 0, pinned_bytes_ = 0;
  cudaStream_t stream_ = nullptr, copy_ = nullptr;
  std::vector<cudaEvent_t> events_, done_, start_, end_, layers_;
};

// A ring carved into `count` slots for one transfer. Pinned side of slot i:
// [status (256) | table staging | bytes].
struct Slots {
  Ring* ring = nullptr;
  int count = 0;
  uint64_t device_stride = 0, pinned_stride = 0, tables = 0;
  uint8_t* device(int i) const { return ring->device() + static_cast<uint64_t>(i) * device_stride; }
  uint8_t* status(int i) const { return ring->pinned() + static_cast<uint64_t>(i) * pinned_stride; }
  uint8_t* host_tables(int i) const { return status(i) + kAlign; }
  uint8_t* host_bytes(int i) const { return host_tables(i) + tables; }
  const SlotStatus& status_block(int i) const { return *reinterpret_cast<const SlotStatus*>(status(i)); }
};

// How many slots of (slot_bytes, table_bytes, io_bytes) `ring` holds (up to
// its event count).
Slots Carve(Ring* ring, uint64_t slot_bytes, uint64_t table_bytes, uint64_t io_bytes) {
  Slots s;
  s.ring = ring;
  s.device_stride = Align(slot_bytes);
  s.tables = Align(table_bytes);
  s.pinned_stride = kAlign + s.tables + Align(io_bytes);
  const uint64_t fit = std::min(ring->device_bytes() / s.device_stride, ring->pinned_bytes() / s.pinned_stride);
  s.count = static_cast<int>(std::min<uint64_t>(fit, static_cast<uint64_t>(ring->max_slots())));
  return s;
}

// Free slot indices, handed between the launching thread and the sender.
class SlotQueue {
 public:
  explicit SlotQueue(int n) {
    for (int i = 0; i < n; ++i) free_.push_back(i);
  }
  // A free slot, or -1 once Fail was called.
  int Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !free_.empty() || failed_; });
    if (failed_) return -1;
    const int i = free_.front();
    free_.pop_front();
    return i;
  }
  void Release(int i) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(i);
    cv_.notify_all();
  }
  // Encoded windows waiting for the sender: (window, slot); -1 window ends.
  void Push(int window, int slot) {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back({window, slot});
    cv_.notify_all();
  }
  bool Pop(int* window, int* slot) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || failed_; });
    if (failed_ || ready_.front().first < 0) return false;
    *window = ready_.front().first;
    *slot = ready_.front().second;
    ready_.pop_front();
    return true;
  }
  void Fail() {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    cv_.notify_all();
  }
  bool failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> free_;
  std::deque<std::pair<int, int>> ready_;
  bool failed_ = false;
};

// What a producer hands over with each layer: its device view and the
// event recorded on the engine's stream once the layer was queued there.
struct ReadyLayer {
  KvView view;
  cudaEvent_t event = nullptr;
};
using LayerGate = connector::LayerGate<ReadyLayer>;

// Events of one transfer's layers (destroyed with it; a pending event's
// resources are released once it completes).
class LayerEvents {
 public:
  ~LayerEvents() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }
  Status Init(int layers) {
    for (int l = 0; l < layers; ++l) {
      cudaEvent_t e = nullptr;
      KVSERVE_RETURN_IF_ERROR(Cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
      events_.push_back(e);
    }
    return Status::Ok();
  }
  cudaEvent_t operator[](int l) const { return events_[l]; }

 private:
  std::vector<cudaEvent_t> events_;
};

// One request's KV as per-layer device views (a producer's), read as a
// paged view with one block per layer: layer l's K at its view's data, V at
// data + kind stride, slots and heads at its strides. Layers not produced
// yet point at layer 0 (never read before they are set).
class LayerPages {
 public:
  LayerPages(const KvShape& shape, DType dtype) : shape_(shape), dtype_(dtype), keys_(shape.layers), values_(shape.layers) {}

  // Records layer `layer`'s view; InvalidArgument when it cannot be read as
  // one page of the others' geometry (head_dim not contiguous, strides
  // differing from layer 0's, a null pointer).
  Status Set(int layer, const KvView& v) {
    if (v.data == nullptr) return Status::InvalidArgument("layer " + std::to_string(layer) + " has no data");
    if (v.strides.dim != 1)
      return Status::InvalidArgument("device layers need head_dim contiguous (dim stride 1), layer " +
                                     std::to_string(layer) + " has " + std::to_string(v.strides.dim));
    const PagedStrides s{0, v.strides.token, v.strides.head};
    if (layer == 0) {
      strides_ = s;
      std::fill(keys_.begin(), keys_.end(), v.data);
      std::fill(values_.begin(), values_.end(), v.data);
    } else if (!(s == strides_)) {
      return Status::InvalidArgument("layer " + std::to_string(layer) +
                                     "'s token/head strides differ from layer 0's");
    }
    keys_[layer] = v.data;
    values_[layer] = static_cast<const std::byte*>(v.data) + v.strides.kind * static_cast<int64_t>(DTypeSize(dtype_));
    return Status::Ok();
  }

  PagedKvView view() const {
    PagedKvView p;
    p.dtype = dtype_;
    p.shape = shape_;
    p.block_size = shape_.tokens;
    p.num_blocks = 1;
    p.strides = strides_;
    p.key_pages = keys_.data();
    p.value_pages = values_.data();
    p.block_table = &block_;
    return p;
  }

 private:
  KvShape shape_;
  DType dtype_;
  PagedStrides strides_;
  std::vector<const void*> keys_, values_;
  int32_t block_ = 0;
};

// A small cache of the encoders and decoders of recent frame shapes (their
// window plans take a pass over the frame to build).
template <typename T>
class RecentCache {
 public:
  std::shared_ptr<T> Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = items_.begin(); it != items_.end(); ++it)
      if (it->first == key) {
        items_.splice(items_.begin(), items_, it);
        return it->second;
      }
    return nullptr;
  }
  void Put(const std::string& key, std::shared_ptr<T> value) {
    std::lock_guard<std::mutex> lock(mu_);
    items_.emplace_front(key, std::move(value));
    if (items_.size() > 8) items_.pop_back();
  }

 private:
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<T>>> items_;
};

class DeviceReception;

class DeviceConnectorImpl final : public DeviceConnector {
 public:
  explicit DeviceConnectorImpl(DeviceConnectorOptions options) : options_(options) {}

  Status Supports(const Profile& profile, const KvShape& shape) const override {
    return CheckSupported(profile, shape);
  }

  DeviceMemoryStats memory() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  Result<StreamResult> StreamKv(Connection& connection, const Profile& profile, const HeadScores* head_scores,
                                const DeviceKvSource& kv, uint64_t transfer_id, void* engine_stream) override {
    KVSERVE_RETURN_IF_ERROR(Cuda(cudaSetDevice(options_.device), "cudaSetDevice"));
    const KvShape shape = std::visit([](const auto& v) { return v.shape; }, kv);
    const DType dtype = std::visit([](const auto& v) { return v.dtype; }, kv);
    KVSERVE_RETURN_IF_ERROR(std::visit([](const auto& v) { return v.Validate(); }, kv)
                                .WithContext("encoding transfer " + std::to_string(transfer_id)));
    return Send(connection, profile, head_scores, shape, dtype, transfer_id, engine_stream, &kv, nullptr);
  }

  Result<StreamResult> StreamKvWhileProducing(Connection& connection, const Profile& profile,
                                              const HeadScores* head_scores, const KvShape& shape, DType dtype,
                                              uint64_t transfer_id, const LayerProducer& produce,
                                              void* engine_stream) override {
    KVSERVE_RETURN_IF_ERROR(Cuda(cudaSetDevice(options_.device), "cudaSetDevice"));
    if (shape.layers <= 0 || shape.kv_heads <= 0 || shape.tokens <= 0 || shape.head_dim <= 0)
      return Status::InvalidArgument("StreamKvWhileProducing: the KV shape must be positive");
    LayerGate gate(shape.layers);
    LayerEvents events;
    KVSERVE_RETURN_IF_ERROR(events.Init(shape.layers));
    Result<StreamResult> streamed = Status::Internal("unset");
    std::thread stream_thread([&] {
      (void)cudaSetDevice(options_.device);
      streamed = Send(connection, profile, head_scores, shape, dtype, transfer_id, engine_stream, nullptr, &gate);
    });
    int next = 0;
    std::string mismatch;
    Status produced = produce([&](int layer, const KvView& v) {
      const bool fits = mismatch.empty() && layer == next && layer < shape.layers && v.dtype == dtype &&
                        v.shape.layers == 1 && v.shape.kv_heads == shape.kv_heads &&
                        v.shape.tokens == shape.tokens && v.shape.head_dim == shape.head_dim;
      if (!fits) {
        if (mismatch.empty())
          mismatch = "then layer " + std::to_string(layer) + " as [" + std::to_string(v.shape.layers) + "," +
                     std::to_string(v.shape.kv_heads) + "," + std::to_string(v.shape.tokens) + "," +
                     std::to_string(v.shape.head_dim) + "] " + std::string(DTypeName(v.dtype));
        gate.Fail();
        return;
      }
      // Recorded now, on the producer's thread: the encode of this layer
      // waits for the engine's work queued so far, not for later layers'.
      if (cudaEventRecord(events[layer], AsStream(engine_stream)) != cudaSuccess) {
        mismatch = "then recording layer " + std::to_string(layer) + "'s event failed";
        gate.Fail();
        return;
      }
      gate.MarkReady(layer, ReadyLayer{v, events[layer]});
      ++next;
    });
    if (produced.ok() && (next != shape.layers || !mismatch.empty()))
      produced = Status::Internal("the producer delivered " + std::to_string(next) + " of " +
                                  std::to_string(shape.layers) + " layers in the expected shape" +
                                  (mismatch.empty() ? "" : ", " + mismatch));
    if (produced.ok()) {
      // When the engine's stream has computed the last layer: the KV time
      // counts from there (the encoder may still be busy with earlier
      // layers' windows, waiting for free slots).
      const bool synced = cudaEventSynchronize(events[shape.layers - 1]) == cudaSuccess;
      gate.MarkDone(synced ? MonotonicSeconds() : 0.0);
    } else {
      gate.Fail();
    }
    stream_thread.join();
    if (!produced.ok()) return produced;
    return streamed;
  }

  Result<KvReceiveResult> ReceiveKvFrom(Connection& connection, const Message& begin,
                                        const KvDestinationCallback& destination, const KvReceiveOptions& options,
                                        void* engine_stream) override;
  Result<KvReceiveResult> ReceiveKvWith(const FrameSource& source, const KvDestinationCallback& destination,
                                        const KvReceiveOptions& options, void* engine_stream) override;

  Status EncodeFrame(const Profile& profile, const HeadScores* head_scores, const DeviceKvSource& kv,
                     ByteSink& sink, void* engine_stream) override {
    KVSERVE_RETURN_IF_ERROR(Cuda(cudaSetDevice(options_.device), "cudaSetDevice"));
    KVSERVE_RETURN_IF_ERROR(std::visit([](const auto& v) { return v.Validate(); }, kv));
    const KvShape shape = std::visit([](const auto& v) { return v.shape; }, kv);
    const DType dtype = std::visit([](const auto& v) { return v.dtype; }, kv);
    const Encoded e = EncodeInto(sink, profile, head_scores, shape, dtype, engine_stream, &kv, nullptr);
    KVSERVE_RETURN_IF_ERROR(e.encode);
    return e.out;
  }

 private:
  // The encoder of (profile, shape, dtype, scores) with the largest windows
  // whose slots fit the budgets at least twice (cached).
  Result<std::shared_ptr<WindowedEncoder>> EncoderFor(const Profile& profile, const HeadScores* scores,
                                                      const KvShape& shape, DType dtype) {
    const std::string key = profile.ToString() + "|" + std::to_string(shape.layers) + "x" +
                            std::to_string(shape.kv_heads) + "x" + std::to_string(shape.tokens) + "x" +
                            std::to_string(shape.head_dim) + "|" + std::string(DTypeName(dtype)) + "|" +
                            std::to_string(reinterpret_cast<uintptr_t>(scores));
    if (auto hit = encoders_.Find(key)) return hit;
    uint64_t window = WindowTarget();
    for (int attempt = 0;; ++attempt) {
      KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<WindowedEncoder> enc,
                               WindowedEncoder::Create(profile, shape, dtype, scores, WindowOptions{window}));
      if (FitsTwice(enc->SlotBytes(), enc->TableBytes(), enc->SlotBytes() - enc->OutputOffset()) ||
          attempt == 6) {
        std::shared_ptr<WindowedEncoder> shared = std::move(enc);
        encoders_.Put(key, shared);
        return shared;
      }
      window /= 2;
    }
  }

  Result<std::shared_ptr<WindowedDecoder>> DecoderFor(std::span<const uint8_t> header) {
    const std::string key(header.begin(), header.end());
    if (auto hit = decoders_.Find(key)) return hit;
    uint64_t window = WindowTarget();
    for (int attempt = 0;; ++attempt) {
      KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<WindowedDecoder> dec,
                               WindowedDecoder::Create(header, WindowOptions{window}));
      if (FitsTwice(dec->SlotBytes(), dec->TableBytes(), dec->InputCapacity()) || attempt == 6) {
        std::shared_ptr<WindowedDecoder> shared = std::move(dec);
        decoders_.Put(key, shared);
        return shared;
      }
      window /= 2;
    }
  }

  uint64_t WindowTarget() const {
    return std::max<uint64_t>(options_.device_budget_bytes / (2 * std::max(2, options_.max_slots)), 1);
  }
  bool FitsTwice(uint64_t slot, uint64_t tables, uint64_t io) const {
    return 2 * Align(slot) <= options_.device_budget_bytes &&
           2 * (kAlign + Align(tables) + Align(io)) <= options_.pinned_budget_bytes;
  }

  // A ring for one transfer (a cached one when free), carved for the slot
  // geometry; ResourceExhausted when fewer than two slots fit or the device
  // is out of memory.
  Result<std::unique_ptr<Ring>> TakeRing(uint64_t slot, uint64_t tables, uint64_t io, Slots* slots) {
    std::unique_ptr<Ring> ring;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_rings_.empty()) {
        ring = std::move(free_rings_.back());
        free_rings_.pop_back();
      }
    }
    if (ring == nullptr) {
      ring = std::make_unique<Ring>();
      Status s = ring->Init(options_.device_budget_bytes, options_.pinned_budget_bytes, std::max(2, options_.max_slots));
      if (!s.ok()) return s;
      std::lock_guard<std::mutex> lock(mu_);
      stats_.bytes_now += ring->device_bytes();
      stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.bytes_now);
    }
    *slots = Carve(ring.get(), slot, tables, io);
    if (slots->count < 2) {
      const uint64_t need = 2 * Align(slot);
      ReturnRing(std::move(ring));
      return Status::ResourceExhausted(
          "a window needs a device slot of " + std::to_string(slot) + " bytes and " +
          std::to_string(slots->pinned_stride) + " pinned bytes; two do not fit the connector's budgets (" +
          std::to_string(options_.device_budget_bytes) + " device, " + std::to_string(options_.pinned_budget_bytes) +
          " pinned; " + std::to_string(need) + " device bytes needed): raise the budget or use smaller records "
          "(the profile's chunk)");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.peak_transfer_bytes = std::max(stats_.peak_transfer_bytes, ring->device_bytes());
    }
    return ring;
  }
  void ReturnRing(std::unique_ptr<Ring> ring) {
    if (ring == nullptr) return;
    (void)cudaStreamSynchronize(ring->stream());
    (void)cudaStreamSynchronize(ring->copy());
    std::lock_guard<std::mutex> lock(mu_);
    free_rings_.push_back(std::move(ring));
  }

  // What encoding a frame into a sink came to: the sink's first error
  // (`out`), the encoder's or producer's (`encode`), and the timings.
  struct Encoded {
    Status out, encode;
    bool began = false;  // the header went to `out` (a transfer to abort on failure)
    double gpu_seconds = 0, producer_wait = 0, start = 0;
    // With a producer: when its last layer was computed on the GPU (host
    // clock, from the producer's thread), 0 otherwise. The KV time is what
    // follows it.
    double producer_done = 0;
  };
  // Encodes the frame of `whole` (or of the producer behind `gate`) window
  // by window into `out`: the header, then each window's bytes.
  Encoded EncodeInto(ByteSink& out, const Profile& profile, const HeadScores* scores, const KvShape& shape,
                     DType dtype, void* engine_stream, const DeviceKvSource* whole, LayerGate* gate);
  Result<StreamResult> Send(Connection& connection, const Profile& profile, const HeadScores* scores,
                            const KvShape& shape, DType dtype, uint64_t transfer_id, void* engine_stream,
                            const DeviceKvSource* whole, LayerGate* gate);

  friend class DeviceReception;

  DeviceConnectorOptions options_;
  mutable std::mutex mu_;
  DeviceMemoryStats stats_;
  std::vector<std::unique_ptr<Ring>> free_rings_;
  RecentCache<WindowedEncoder> encoders_;
  RecentCache<WindowedDecoder> decoders_;
};

DeviceConnectorImpl::Encoded DeviceConnectorImpl::EncodeInto(ByteSink& out, const Profile& profile,
                                                              const HeadScores* scores, const KvShape& shape,
                                                              DType dtype, void* engine_stream,
                                                              const DeviceKvSource* whole, LayerGate* gate) {
  Encoded result;
  auto enc_or = EncoderFor(profile, scores, shape, dtype);
  if (!enc_or.ok()) {
    if (gate != nullptr) gate->Fail();
    result.encode = enc_or.status();
    return result;
  }
  const std::shared_ptr<WindowedEncoder> enc = *enc_or;
  Slots slots;
  auto ring_or = TakeRing(enc->SlotBytes(), enc->TableBytes(), enc->SlotBytes() - enc->OutputOffset(), &slots);
  if (!ring_or.ok()) {
    if (gate != nullptr) gate->Fail();
    result.encode = ring_or.status();
    return result;
  }
  std::unique_ptr<Ring> ring = std::move(*ring_or);
  Ring* r = ring.get();
  const bool static_sizes = enc->FrameSizeIsStatic();
  const std::vector<FrameWindow>& windows = enc->windows();

  SlotQueue queue(slots.count);
  Status send_status, encode_status;
  double gpu_seconds = 0;
  bool began = false;
  result.start = MonotonicSeconds();
  std::thread send_thread([&] {
    (void)cudaSetDevice(options_.device);
    Status s = out.Append(enc->header());
    began = s.ok();
    int w = 0, i = 0;
    while (s.ok() && queue.Pop(&w, &i)) {
      s = Cuda(cudaEventSynchronize(r->done(i)), "waiting for an encoded window");
      if (!s.ok()) break;
      const SlotStatus& st = slots.status_block(i);
      s = SlotStatusToStatus(st, windows[w]);
      if (!s.ok()) {
        encode_status = s;
        break;
      }
      float ms = 0;
      if (cudaEventElapsedTime(&ms, r->start(i), r->end(i)) == cudaSuccess) gpu_seconds += ms / 1e3;
      if (st.bytes > windows[w].max_bytes) {
        s = Status::Internal("window " + std::to_string(w) + " encoded to more bytes than its plan allows");
        encode_status = s;
        break;
      }
      if (!static_sizes) {
        s = Cuda(cudaMemcpyAsync(slots.host_bytes(i), slots.device(i) + enc->OutputOffset(), st.bytes,
                                 cudaMemcpyDeviceToHost, r->copy()),
                 "copying a window to the host");
        if (s.ok()) s = Cuda(cudaStreamSynchronize(r->copy()), "copying a window to the host");
        if (!s.ok()) {
          encode_status = s;
          break;
        }
      }
      s = out.Append(std::span<const uint8_t>(slots.host_bytes(i), st.bytes));
      queue.Release(i);
    }
    if (!s.ok()) {
      if (encode_status.ok()) send_status = s;
      queue.Fail();
    }
  });

  // The whole cache's view, or the producer's layers as pages.
  LayerPages pages(shape, dtype);
  cudaStream_t kv_stream = r->stream();
  Status launch = Status::Ok();
  if (whole != nullptr) {
    auto ev = r->LayerEvent(0);
    launch = ev.status();
    if (launch.ok()) launch = Cuda(cudaEventRecord(*ev, AsStream(engine_stream)), "recording the engine's stream");
    if (launch.ok()) launch = Cuda(cudaStreamWaitEvent(kv_stream, *ev, 0), "waiting for the engine's stream");
  }
  for (int layer = 0; launch.ok() && layer < shape.layers && !queue.failed(); ++layer) {
    if (gate != nullptr) {
      ReadyLayer ready_layer;
      if (!gate->Wait(layer, &ready_layer)) {
        launch = Status::Unavailable("the producer of the KV failed before layer " + std::to_string(layer));
        break;
      }
      launch = pages.Set(layer, ready_layer.view);
      if (launch.ok())
        launch = Cuda(cudaStreamWaitEvent(kv_stream, ready_layer.event, 0), "waiting for the engine's stream");
      if (!launch.ok()) break;
    }
    for (int w = enc->FirstWindow(layer); launch.ok() && w < enc->FirstWindow(layer + 1); ++w) {
      const int i = queue.Acquire();
      if (i < 0) break;  // the sender failed
      (void)cudaEventRecord(r->start(i), kv_stream);
      if (gate != nullptr) {
        launch = enc->EncodeWindowPaged(w, pages.view(), slots.device(i), slots.host_tables(i), kv_stream);
      } else if (const auto* paged = std::get_if<PagedKvView>(whole)) {
        launch = enc->EncodeWindowPaged(w, *paged, slots.device(i), slots.host_tables(i), kv_stream);
      } else {
        launch = enc->EncodeWindow(w, std::get<KvView>(*whole), slots.device(i), slots.host_tables(i), kv_stream);
      }
      if (!launch.ok()) break;
      (void)cudaEventRecord(r->end(i), kv_stream);
      launch = Cuda(cudaMemcpyAsync(slots.status(i), slots.device(i), kSlotStatusBytes, cudaMemcpyDeviceToHost,
                                    kv_stream),
                    "copying a slot's status");
      if (launch.ok() && static_sizes)
        launch = Cuda(cudaMemcpyAsync(slots.host_bytes(i), slots.device(i) + enc->OutputOffset(),
                                      windows[w].max_bytes, cudaMemcpyDeviceToHost, kv_stream),
                      "copying a window to the host");
      if (launch.ok()) launch = Cuda(cudaEventRecord(r->done(i), kv_stream), "cudaEventRecord");
      if (launch.ok()) queue.Push(w, i);
    }
  }
  // The frame ends only once the producer succeeded.
  if (launch.ok() && !queue.failed() && gate != nullptr && !gate->Wait(shape.layers))
    launch = Status::Unavailable("the producer of the KV failed after its last layer");
  if (launch.ok()) {
    queue.Push(-1, -1);
  } else {
    queue.Fail();
  }
  send_thread.join();
  result.producer_wait = gate != nullptr ? gate->wait_seconds() : 0.0;
  result.producer_done = gate != nullptr ? gate->done_at() : 0.0;
  ReturnRing(std::move(ring));
  result.gpu_seconds = gpu_seconds;
  result.began = began;
  result.out = send_status;
  result.encode = encode_status.ok() ? launch : encode_status;
  return result;
}

Result<StreamResult> DeviceConnectorImpl::Send(Connection& connection, const Profile& profile,
                                               const HeadScores* scores, const KvShape& shape, DType dtype,
                                               uint64_t transfer_id, void* engine_stream,
                                               const DeviceKvSource* whole, LayerGate* gate) {
  const std::string what = "transfer " + std::to_string(transfer_id);
  FrameSender sender(&connection);
  const Encoded e = EncodeInto(sender.sink(transfer_id), profile, scores, shape, dtype, engine_stream, whole, gate);
  if (!e.out.ok()) return e.out.WithContext("sending " + what);
  if (!e.encode.ok()) {
    // A transfer that never began (no ring, no encoder) leaves nothing on
    // the wire to abort.
    if (e.began) (void)sender.Abort(e.encode);
    return e.encode.WithContext("encoding " + what);
  }
  if (sender.sink_has_partial()) return Status::Internal("an incomplete record was left in " + what);
  StreamResult result;
  KVSERVE_ASSIGN_OR_RETURN(result.transfer, sender.Finish());
  result.ack_time = MonotonicSeconds();
  result.encode_seconds = e.gpu_seconds;
  // KV movement after the producer: from its last layer's completion on the
  // GPU (the host's gate waits say nothing of the GPU), else from the start.
  result.kv_seconds = e.producer_done > 0 ? std::max(result.ack_time - std::max(e.start, e.producer_done), 1e-9)
                                          : std::max(result.ack_time - e.start - e.producer_wait, 1e-9);
  return result;
}

// One frame's reception into device memory (ReceiveKvFrom's state).
class DeviceReception {
 public:
  DeviceReception(DeviceConnectorImpl* owner, const KvDestinationCallback& destination,
                  const KvReceiveOptions& options, void* engine_stream)
      : owner_(owner), destination_(destination), options_(options), engine_stream_(engine_stream) {}
  ~DeviceReception() { (void)cudaFree(mask_); }

  FrameHandler Handler() {
    FrameHandler h;
    h.on_header = [this](uint64_t id, std::span<const uint8_t> header) { return Refusing(OnHeader(id, header)); };
    h.place_record = [this](uint64_t length) { return Place(length); };
    h.on_record = [this](std::span<const uint8_t> record) { return Refusing(OnRecord(record)); };
    return h;
  }

  Result<KvReceiveResult> Finish(Result<TransferStats> transfer);
  std::unique_ptr<Ring> TakeRingBack() { return std::move(ring_); }

 private:
  Status Refusing(Status s) {
    if (!s.ok()) refused_ = true;
    return s;
  }

  Status OnHeader(uint64_t id, std::span<const uint8_t> header);
  Status OnRecord(std::span<const uint8_t> record);
  std::span<uint8_t> Place(uint64_t length);
  // A free slot (waiting for the oldest decode when none is): -1 and
  // `*error` when a finished window failed or every slot holds an
  // incomplete window.
  int FreeSlot(Status* error);
  Status CheckSlot(int i);
  Status Launch(int i);

  DeviceConnectorImpl* owner_;
  const KvDestinationCallback& destination_;
  const KvReceiveOptions& options_;
  void* engine_stream_;
  std::shared_ptr<WindowedDecoder> decoder_;
  std::unique_ptr<Ring> ring_;
  Slots slots_;
  KvDestination dest_;
  uint8_t* mask_ = nullptr;
  uint64_t mask_bytes_ = 0;
  // Per slot: its window (-1 free), record count and bytes so far, whether
  // its decode is queued (and not yet checked).
  std::vector<int> window_, count_;
  std::vector<uint64_t> fill_;
  std::vector<bool> busy_;
  std::deque<int> busy_order_;
  std::map<int, int> slot_of_;
  int open_ = -1;  // where the next record is placed
  KvReceiveResult result_;
  bool started_ = false, refused_ = false;
  Status failed_;  // the first window that failed to decode
  double gpu_seconds_ = 0;
};

Status DeviceReception::OnHeader(uint64_t id, std::span<const uint8_t> header) {
  if (options_.keep_mask) options_.keep_mask->clear();
  KVSERVE_ASSIGN_OR_RETURN(decoder_, owner_->DecoderFor(header));
  if (decoder_->HeaderBytes() != header.size()) return Status::Corruption("frame header: trailing bytes");
  result_.info = decoder_->info();
  KVSERVE_ASSIGN_OR_RETURN(dest_, destination_(id, result_.info));
  const uint64_t io = decoder_->InputCapacity();
  KVSERVE_ASSIGN_OR_RETURN(ring_, owner_->TakeRing(decoder_->SlotBytes(), decoder_->TableBytes(), io, &slots_));
  window_.assign(slots_.count, -1);
  count_.assign(slots_.count, 0);
  fill_.assign(slots_.count, 0);
  busy_.assign(slots_.count, false);
  // The destination may reuse memory the engine's stream still works on.
  KVSERVE_ASSIGN_OR_RETURN(cudaEvent_t ev, ring_->LayerEvent(0));
  KVSERVE_RETURN_IF_ERROR(Cuda(cudaEventRecord(ev, AsStream(engine_stream_)), "recording the engine's stream"));
  KVSERVE_RETURN_IF_ERROR(Cuda(cudaStreamWaitEvent(ring_->stream(), ev, 0), "waiting for the engine's stream"));
  const FrameInfo& info = result_.info;
  if (options_.keep_mask && info.profile.quantizer() == QuantizerType::kDuo) {
    mask_bytes_ = static_cast<uint64_t>(info.shape.layers) * 2 * info.shape.kv_heads * info.shape.tokens;
    KVSERVE_RETURN_IF_ERROR(Cuda(cudaMalloc(reinterpret_cast<void**>(&mask_), mask_bytes_), "allocating the keep mask"));
  }
  started_ = true;
  return Status::Ok();
}

Status DeviceReception::CheckSlot(int i) {
  Status s = Cuda(cudaEventSynchronize(ring_->done(i)), "waiting for a decoded window");
  float ms = 0;
  if (cudaEventElapsedTime(&ms, ring_->start(i), ring_->end(i)) == cudaSuccess) gpu_seconds_ += ms / 1e3;
  busy_[i] = false;
  const int w = window_[i];
  window_[i] = -1;
  count_[i] = 0;
  fill_[i] = 0;
  slot_of_.erase(w);
  if (s.ok()) s = SlotStatusToStatus(slots_.status_block(i), decoder_->windows()[w]);
  // The first failure is the frame's verdict, whatever is asked next.
  if (failed_.ok()) failed_ = s;
  return failed_;
}

int DeviceReception::FreeSlot(Status* error) {
  if (!failed_.ok()) {
    *error = failed_;
    return -1;
  }
  for (int i = 0; i < slots_.count; ++i)
    if (window_[i] < 0 && i != open_) return i;
  while (!busy_order_.empty()) {
    const int i = busy_order_.front();
    busy_order_.pop_front();
    *error = CheckSlot(i);
    if (!error->ok()) return -1;
    if (i != open_) return i;
  }
  *error = Status::ResourceExhausted("records arrive too far out of plan order for the device ring (" +
                                     std::to_string(slots_.count) + " windows open at once)");
  return -1;
}

std::span<uint8_t> DeviceReception::Place(uint64_t length) {
  if (!started_) return {};
  if (open_ < 0) {
    Status error;
    open_ = FreeSlot(&error);
    if (open_ < 0) return {};  // on_record then fails with the same cause
  }
  if (fill_[open_] + length > decoder_->InputCapacity()) return {};
  return std::span<uint8_t>(slots_.host_bytes(open_) + fill_[open_], length);
}

Status DeviceReception::OnRecord(std::span<const uint8_t> record) {
  if (!started_) return Status::Corruption("chunk record before the frame header");
  KVSERVE_ASSIGN_OR_RETURN(const int w, decoder_->WindowOfRecord(record));
  const FrameWindow& fw = decoder_->windows()[w];
  int i = -1;
  if (auto it = slot_of_.find(w); it != slot_of_.end()) {
    i = it->second;
  } else if (open_ >= 0 && window_[open_] < 0) {
    i = open_;
  } else {
    Status error;
    i = FreeSlot(&error);
    if (i < 0) return error;
  }
  if (window_[i] < 0) {
    window_[i] = w;
    slot_of_[w] = i;
  }
  if (count_[i] >= fw.record_end - fw.record_begin)
    return Status::Corruption("window " + std::to_string(w) + " received more records than it has");
  uint8_t* at = slots_.host_bytes(i) + fill_[i];
  if (fill_[i] + record.size() > decoder_->InputCapacity())
    return Status::Corruption("records of window " + std::to_string(w) + " exceed the bytes its plan allows");
  if (record.data() != at) std::memmove(at, record.data(), record.size());  // not read in place
  fill_[i] += record.size();
  ++count_[i];
  ++result_.records;
  if (count_[i] == fw.record_end - fw.record_begin) {
    KVSERVE_RETURN_IF_ERROR(Launch(i));
    if (open_ == i) open_ = -1;
  }
  return Status::Ok();
}

Status DeviceReception::Launch(int i) {
  const int w = window_[i];
  cudaStream_t s = ring_->stream();
  KVSERVE_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(slots_.device(i) + decoder_->InputOffset(), slots_.host_bytes(i),
                                               fill_[i], cudaMemcpyHostToDevice, s),
                               "copying a window to the device"));
  (void)cudaEventRecord(ring_->start(i), s);
  KVSERVE_RETURN_IF_ERROR(std::visit(
      [&](const auto& out) -> Status {
        if constexpr (std::is_same_v<std::decay_t<decltype(out)>, MutableKvView>) {
          return decoder_->DecodeWindow(w, slots_.device(i), fill_[i], out, mask_, slots_.host_tables(i), s);
        } else {
          return decoder_->DecodeWindowPaged(w, slots_.device(i), fill_[i], out, mask_, slots_.host_tables(i), s);
        }
      },
      dest_));
  (void)cudaEventRecord(ring_->end(i), s);
  KVSERVE_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(slots_.status(i), slots_.device(i), kSlotStatusBytes,
                                               cudaMemcpyDeviceToHost, s),
                               "copying a slot's status"));
  KVSERVE_RETURN_IF_ERROR(Cuda(cudaEventRecord(ring_->done(i), s), "cudaEventRecord"));
  busy_[i] = true;
  busy_order_.push_back(i);
  return Status::Ok();
}

Result<KvReceiveResult> DeviceReception::Finish(Result<TransferStats> transfer) {
  // Every queued decode has run and is clean before the result counts.
  Status decoded = Status::Ok();
  while (!busy_order_.empty()) {
    const int i = busy_order_.front();
    busy_order_.pop_front();
    Status s = CheckSlot(i);
    if (decoded.ok()) decoded = s;
  }
  if (options_.refused) *options_.refused = refused_;
  if (!transfer.ok()) return transfer.status();
  if (!decoded.ok()) {
    if (options_.refused) *options_.refused = true;
    return decoded;
  }
  if (!started_ || result_.records != result_.info.chunk_count) {
    if (options_.refused) *options_.refused = true;
    return Status::Corruption("transfer " + std::to_string(transfer->transfer_id) + " ended after " +
                              std::to_string(result_.records) + " of " + std::to_string(result_.info.chunk_count) +
                              " records");
  }
  if (mask_ != nullptr) {
    options_.keep_mask->resize(mask_bytes_);
    KVSERVE_RETURN_IF_ERROR(Cuda(cudaMemcpy(options_.keep_mask->data(), mask_, mask_bytes_, cudaMemcpyDeviceToHost),
                                 "copying the keep mask"));
  }
  result_.transfer = *transfer;
  result_.decode_seconds = gpu_seconds_;
  return std::move(result_);
}

Result<KvReceiveResult> DeviceConnectorImpl::ReceiveKvFrom(Connection& connection, const Message& begin,
                                                           const KvDestinationCallback& destination,
                                                           const KvReceiveOptions& options, void* engine_stream) {
  return ReceiveKvWith([&](const FrameHandler& h) { return ReceiveFrameFrom(connection, begin, h); }, destination,
                       options, engine_stream);
}

Result<KvReceiveResult> DeviceConnectorImpl::ReceiveKvWith(const FrameSource& source,
                                                           const KvDestinationCallback& destination,
                                                           const KvReceiveOptions& options, void* engine_stream) {
  KVSERVE_RETURN_IF_ERROR(Cuda(cudaSetDevice(options_.device), "cudaSetDevice"));
  DeviceReception reception(this, destination, options, engine_stream);
  auto transfer = source(reception.Handler());
  auto result = reception.Finish(std::move(transfer));
  ReturnRing(reception.TakeRingBack());
  return result;
}

}  // namespace

Result<std::unique_ptr<DeviceConnector>> NewDeviceConnector(DeviceConnectorOptions options) {
  if (!Available()) return Status::NotSupported("no CUDA device");
  if (options.device_budget_bytes == 0 || options.pinned_budget_bytes == 0)
    return Status::InvalidArgument("the device connector's budgets must be positive");
  return std::unique_ptr<DeviceConnector>(new DeviceConnectorImpl(options));
}

}  // namespace kvserve::cuda
