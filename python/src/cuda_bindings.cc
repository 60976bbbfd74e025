// Copyright kvserve authors. The CUDA codec from Python: DeviceFrame,
// CudaEncoder and CudaDecoder (python/kvserve/cuda.py wraps them with
// stream defaults and docs). Built only when the CUDA backend is
// (KVSERVE_PY_CUDA); without it the module reports cuda_available() False.
//
// Streams: every call takes the cudaStream_t it runs on as an integer (0 =
// the legacy default stream). Nothing here synchronises with the host except
// the calls whose docs say so: check(), DeviceFrame sizes of rANS frames,
// copies to pageable host memory, and the constructors (plan upload).
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "kvserve/cuda.h"
#include "kvserve/profile.h"
#include "tensor.h"

namespace kvserve::python {
namespace py = pybind11;
namespace {

using Stream = cudaStream_t;
using cuda::ByteRange;

Stream AsStream(intptr_t s) { return reinterpret_cast<Stream>(s); }

void ThrowCuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw StatusError{Status::Internal(what + ": " + cudaGetErrorString(e))};
}

uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Makes `device` current for the guard's lifetime.
// Never throws (destructors use it): a failed switch shows in the next call.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Orders `consumer` after the work queued so far on `producer`.
void StreamWaits(Stream consumer, Stream producer) {
  if (consumer == producer) return;
  cudaEvent_t event;
  ThrowCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  cudaEventRecord(event, producer);
  cudaStreamWaitEvent(consumer, event, 0);
  cudaEventDestroy(event);
}

// Device memory from the stream-ordered pool (cudaMallocAsync). It goes back
// to the pool on the stream it came from, after the work of every other
// stream that used it (Use) up to then.
class DeviceAllocation {
 public:
  DeviceAllocation(uint64_t bytes, int device, Stream stream) : bytes_(bytes), device_(device), stream_(stream) {
    DeviceGuard guard(device);
    ThrowCuda(cudaMallocAsync(&ptr_, bytes == 0 ? 1 : bytes, stream),
              "cudaMallocAsync(" + std::to_string(bytes) + " bytes)");
  }
  ~DeviceAllocation() {
    DeviceGuard guard(device_);
    for (Stream s : users_) StreamWaits(stream_, s);
    cudaFreeAsync(ptr_, stream_);
  }
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;

  void Use(Stream s) {
    if (s == stream_) return;
    for (Stream u : users_)
      if (u == s) return;
    users_.push_back(s);
  }
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }
  uint64_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  uint64_t bytes_;
  int device_;
  Stream stream_;
  std::vector<Stream> users_;
};

// A device workspace allocated once (cudaMalloc) for an encoder/decoder.
class Workspace {
 public:
  Workspace(uint64_t bytes, int device) : device_(device) {
    DeviceGuard guard(device);
    ThrowCuda(cudaMalloc(&ptr_, bytes == 0 ? 256 : bytes), "cudaMalloc(workspace)");
  }
  ~Workspace() {
    DeviceGuard guard(device_);
    cudaFree(ptr_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  int device_;
};

// A frame in device memory: our allocation or the caller's buffer.
struct DeviceFrame {
  std::shared_ptr<DeviceAllocation> memory;  // set when we allocated it
  BytesRef borrowed;                         // set when the caller gave `out`
  uint8_t* data = nullptr;
  uint64_t capacity = 0;
  uint64_t* size_word = nullptr;  // device; written by the encoder (rANS frames)
  std::optional<uint64_t> size;   // known without a sync (pack) or read once
  uint64_t header_bytes = 0;
  std::vector<ByteRange> layer_records;  // static frames: each layer's records
  int device = 0;
  Stream stream = nullptr;  // the stream that wrote it

  // The frame's size; for rANS frames this synchronises `stream` once.
  uint64_t Size() {
    if (!size) {
      if (size_word == nullptr) throw StatusError{Status::InvalidArgument("the frame has not been finished")};
      DeviceGuard guard(device);
      uint64_t n = 0;
      {
        py::gil_scoped_release release;
        ThrowCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        ThrowCuda(cudaMemcpy(&n, size_word, sizeof(n), cudaMemcpyDeviceToHost), "read the frame size");
      }
      size = n;
    }
    return *size;
  }
  // Records that stream `s` reads or writes the frame.
  void Use(Stream s) {
    if (memory) memory->Use(s);
    StreamWaits(s, stream);
  }
};

using FramePtr = std::shared_ptr<DeviceFrame>;

// DLPack export of a frame: a 1-D uint8 CUDA tensor of its bytes.
struct FrameExport {
  FramePtr frame;
  int64_t shape[1];
  DLManagedTensor managed;
};

py::capsule FrameCapsule(const FramePtr& frame, std::optional<intptr_t> consumer_stream) {
  const uint64_t n = frame->Size();
  if (consumer_stream && *consumer_stream != -1) {
    const intptr_t s = *consumer_stream == 1 ? 0 : *consumer_stream;
    frame->Use(AsStream(s));
  }
  auto* e = new FrameExport{frame, {static_cast<int64_t>(n)}, {}};
  DLTensor& t = e->managed.dl_tensor;
  t.data = frame->data;
  t.device = DLDevice{kDLCUDA, frame->device};
  t.ndim = 1;
  t.dtype = DLDataType{kDLUInt, 8, 1};
  t.shape = e->shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<FrameExport*>(m->manager_ctx); };
  return py::capsule(&e->managed, "dltensor", [](PyObject* cap) {
    // An unconsumed capsule frees its tensor (DLPack's rule for producers).
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (m != nullptr && m->deleter != nullptr) m->deleter(m);
    }
  });
}

Profile ProfileFrom(py::handle profile) {
  return py::isinstance<Profile>(profile) ? profile.cast<Profile>()
                                          : ValueOrThrow(Profile::Parse(profile.cast<std::string>()));
}

// Makes `stream` wait for the producers of every imported tensor.
void WaitForProducers(const KvLayout& layout, Stream stream) {
  for (const TensorRef& r : layout.refs)
    if (r.producer_stream != 0 && AsStream(r.producer_stream) != stream)
      StreamWaits(stream, AsStream(r.producer_stream == 1 ? 0 : r.producer_stream));
}

int LayoutDevice(const KvLayout& layout) { return layout.refs.empty() ? 0 : layout.refs[0].device_id; }

class CudaEncoderPy {
 public:
  CudaEncoderPy(py::handle profile, std::vector<int64_t> shape, py::handle dtype, py::handle head_scores,
                int device)
      : device_(device) {
    if (shape.size() != 4)
      ThrowInvalid("shape: expected (layers, kv_heads, tokens, head_dim), got " + std::to_string(shape.size()) +
                   " numbers");
    for (int64_t n : shape)
      if (n <= 0 || n > INT32_MAX) ThrowInvalid("shape: every axis must be in [1, 2^31)");
    shape_ = KvShape{static_cast<int32_t>(shape[0]), static_cast<int32_t>(shape[1]),
                     static_cast<int32_t>(shape[2]), static_cast<int32_t>(shape[3])};
    std::optional<DType> dt = DTypeFromPython(dtype);
    if (!dt) ThrowInvalid("dtype is required (bf16, f16 or f32)");
    dtype_ = *dt;
    std::shared_ptr<HeadScores> scores;
    if (py::isinstance<HeadScores>(head_scores)) {
      scores = head_scores.cast<std::shared_ptr<HeadScores>>();
    } else if (py::isinstance<py::str>(head_scores)) {
      scores = std::make_shared<HeadScores>(ValueOrThrow(HeadScores::Load(head_scores.cast<std::string>())));
    } else if (!head_scores.is_none()) {
      scores = py::module_::import("kvserve._kvserve").attr("HeadScores")(head_scores).cast<std::shared_ptr<HeadScores>>();
    }
    DeviceGuard guard(device_);
    const Profile p = ProfileFrom(profile);
    encoder_ = ValueOrThrow(cuda::Encoder::Create(p, shape_, dtype_, scores.get()));
    workspace_ = std::make_unique<Workspace>(encoder_->WorkspaceBytes(), device_);
    if (encoder_->FrameSizeIsStatic())
      for (int l = 0; l < shape_.layers; ++l) layer_records_.push_back(ValueOrThrow(encoder_->StaticLayerRecords(l)));
  }

  // Encodes the whole cache; see python/kvserve/cuda.py for the contract.
  py::object Encode(py::handle kv, py::handle out, intptr_t stream_int, bool check) {
    const Stream stream = AsStream(stream_int);
    KvLayout layout = ImportKv(kv, false, dtype_, "kv", Memory::kCuda, stream_int);
    CheckLayout(layout);
    DeviceGuard guard(device_);
    WaitForProducers(layout, stream);
    Target target = TargetFor(out, stream);
    {
      py::gil_scoped_release release;
      if (layout.whole) {
        ThrowIfError(encoder_->Encode(layout.whole->AsConst(), workspace_->get(), target.frame->data,
                                      target.frame->size_word, stream));
      } else {
        ThrowIfError(encoder_->Begin(workspace_->get(), target.frame->data, stream));
        for (int l = 0; l < shape_.layers; ++l)
          ThrowIfError(encoder_->EncodeLayer(l, LayerView(layout, l), workspace_->get(), target.frame->data, stream));
        ThrowIfError(encoder_->Finish(workspace_->get(), target.frame->size_word, stream));
      }
      if (check) ThrowIfError(encoder_->Check(workspace_->get(), stream));
    }
    return Deliver(target, stream);
  }

  FramePtr Begin(py::handle out, intptr_t stream_int) {
    const Stream stream = AsStream(stream_int);
    DeviceGuard guard(device_);
    if (!out.is_none() && !py::isinstance<DeviceFrame>(out)) {
      BytesRef b = ImportBytes(out, true, "out", stream_int);
      if (!b.on_device())
        ThrowInvalid("out: layer-at-a-time encoding writes into device memory; pass a CUDA buffer or none");
    }
    streaming_ = TargetFor(out, stream).frame;
    ThrowIfError(encoder_->Begin(workspace_->get(), streaming_->data, stream));
    return streaming_;
  }

  void EncodeLayer(int layer, py::handle kv, intptr_t stream_int) {
    if (!streaming_) ThrowInvalid("encode_layer called before begin");
    if (layer < 0 || layer >= shape_.layers)
      ThrowInvalid("layer " + std::to_string(layer) + " outside the encoder's " + std::to_string(shape_.layers) +
                   " layers");
    const Stream stream = AsStream(stream_int);
    KvLayout layout = ImportKv(AsLayerList(kv), false, dtype_, "kv", Memory::kCuda, stream_int);
    KvShape one = shape_;
    one.layers = 1;
    MutableKvView view;
    if (layout.shape == one && layout.dtype == dtype_) {
      // This layer's (K, V): its memory is layer `layer` of the full shape.
      view = layout.whole ? *layout.whole : LayerViewOrThrow(layout, 0);
      view.strides.layer = 0;
    } else {
      CheckLayout(layout);  // the whole cache; only `layer` of it is read
      view = layout.whole ? *layout.whole : LayerViewOrThrow(layout, layer);
    }
    if (LayoutDevice(layout) != device_) ThrowWrongDevice(LayoutDevice(layout));
    view.shape = shape_;
    DeviceGuard guard(device_);
    WaitForProducers(layout, stream);
    streaming_->Use(stream);
    py::gil_scoped_release release;
    ThrowIfError(encoder_->EncodeLayer(layer, view.AsConst(), workspace_->get(), streaming_->data, stream));
  }

  FramePtr Finish(intptr_t stream_int, bool check) {
    if (!streaming_) ThrowInvalid("finish called before begin");
    const Stream stream = AsStream(stream_int);
    DeviceGuard guard(device_);
    FramePtr frame = std::move(streaming_);
    streaming_.reset();
    py::gil_scoped_release release;
    ThrowIfError(encoder_->Finish(workspace_->get(), frame->size_word, stream));
    if (check) ThrowIfError(encoder_->Check(workspace_->get(), stream));
    return frame;
  }

  void Check(intptr_t stream_int) {
    DeviceGuard guard(device_);
    py::gil_scoped_release release;
    ThrowIfError(encoder_->Check(workspace_->get(), AsStream(stream_int)));
  }

  // The C++ API's time per Encode on the same inputs, for the Python-vs-C++
  // benchmark: `repeats` calls between two events, no Python in between.
  double NativeSeconds(py::handle kv, FramePtr frame, int repeats, intptr_t stream_int) {
    const Stream stream = AsStream(stream_int);
    KvLayout layout = ImportKv(kv, false, dtype_, "kv", Memory::kCuda, stream_int);
    CheckLayout(layout);
    if (!layout.whole) ThrowNotSupported("native timing takes one 5-D tensor");
    if (frame->capacity < encoder_->MaxFrameBytes()) ThrowInvalid("frame: too small for this encoder");
    DeviceGuard guard(device_);
    py::gil_scoped_release release;
    return TimeCalls(repeats, stream, [&] {
      return encoder_->Encode(layout.whole->AsConst(), workspace_->get(), frame->data, frame->size_word, stream);
    });
  }

  uint64_t max_frame_bytes() const { return encoder_->MaxFrameBytes(); }
  uint64_t workspace_bytes() const { return encoder_->WorkspaceBytes(); }
  bool frame_size_is_static() const { return encoder_->FrameSizeIsStatic(); }
  uint64_t header_bytes() const { return encoder_->HeaderBytes(); }
  const Profile& profile() const { return encoder_->profile(); }
  int device() const { return device_; }
  py::tuple shape() const { return py::make_tuple(shape_.layers, shape_.kv_heads, shape_.tokens, shape_.head_dim); }
  std::string dtype() const { return std::string(DTypeName(dtype_)); }

 private:
  struct Target {
    FramePtr frame;
    std::optional<BytesRef> host;  // copy the frame here after encoding
  };

  [[noreturn]] void ThrowWrongDevice(int got) const {
    ThrowInvalid("kv is on CUDA device " + std::to_string(got) + ", this encoder on device " +
                 std::to_string(device_) + " (pass device= when creating it)");
  }

  void CheckLayout(const KvLayout& layout) const {
    if (!(layout.shape == shape_) || layout.dtype != dtype_)
      ThrowInvalid("kv: shape (" + std::to_string(layout.shape.layers) + ", " + std::to_string(layout.shape.kv_heads) +
                   ", " + std::to_string(layout.shape.tokens) + ", " + std::to_string(layout.shape.head_dim) + ") " +
                   std::string(DTypeName(layout.dtype)) + " differs from the encoder's (" +
                   std::to_string(shape_.layers) + ", " + std::to_string(shape_.kv_heads) + ", " +
                   std::to_string(shape_.tokens) + ", " + std::to_string(shape_.head_dim) + ") " +
                   std::string(DTypeName(dtype_)));
    if (LayoutDevice(layout) != device_) ThrowWrongDevice(LayoutDevice(layout));
  }

  static MutableKvView LayerViewOrThrow(const KvLayout& layout, int l) {
    if (!layout.layer_views[l])
      ThrowNotSupported("kv[" + std::to_string(l) + "]: K and V have different strides; the CUDA encoder reads "
                        "a layer as one view (make them alike, e.g. .contiguous())");
    return *layout.layer_views[l];
  }
  static KvView LayerView(const KvLayout& layout, int l) { return LayerViewOrThrow(layout, l).AsConst(); }

  // `kv` for encode_layer: a (K, V) pair becomes a one-layer list.
  static py::object AsLayerList(py::handle kv) {
    if ((PyTuple_Check(kv.ptr()) || PyList_Check(kv.ptr())) && py::len(kv) == 2) {
      py::sequence seq = py::reinterpret_borrow<py::sequence>(kv);
      py::handle first = seq[0];
      if (!PyTuple_Check(first.ptr()) && !PyList_Check(first.ptr())) return py::make_tuple(py::reinterpret_borrow<py::object>(kv));
    }
    return py::reinterpret_borrow<py::object>(kv);
  }

  FramePtr NewFrame(Stream stream) {
    auto f = std::make_shared<DeviceFrame>();
    const uint64_t cap = encoder_->MaxFrameBytes();
    f->memory = std::make_shared<DeviceAllocation>(RoundUp(cap, 256) + 256, device_, stream);
    f->data = f->memory->data();
    f->capacity = cap;
    f->size_word = reinterpret_cast<uint64_t*>(f->data + RoundUp(cap, 256));
    Describe(*f, stream);
    return f;
  }

  void Describe(DeviceFrame& f, Stream stream) {
    f.header_bytes = encoder_->HeaderBytes();
    f.device = device_;
    f.stream = stream;
    f.layer_records = layer_records_;
    f.size.reset();
    if (encoder_->FrameSizeIsStatic()) f.size = encoder_->MaxFrameBytes();
  }

  Target TargetFor(py::handle out, Stream stream) {
    Target t;
    if (out.is_none()) {
      t.frame = NewFrame(stream);
      return t;
    }
    if (py::isinstance<DeviceFrame>(out)) {  // reuse a frame of this encoder
      FramePtr f = out.cast<FramePtr>();
      if (f->capacity < encoder_->MaxFrameBytes() || f->size_word == nullptr)
        ThrowInvalid("out: the DeviceFrame holds " + std::to_string(f->capacity) + " bytes, this encoder needs " +
                     std::to_string(encoder_->MaxFrameBytes()));
      if (f->device != device_) ThrowInvalid("out: a DeviceFrame on another device");
      f->Use(stream);
      Describe(*f, stream);
      t.frame = f;
      return t;
    }
    BytesRef b = ImportBytes(out, true, "out", reinterpret_cast<intptr_t>(stream));
    const uint64_t need = encoder_->MaxFrameBytes();
    if (b.bytes < need)
      ThrowInvalid("out: " + std::to_string(b.bytes) + " bytes, the frame needs up to " + std::to_string(need) +
                   " (CudaEncoder.max_frame_bytes)");
    if (b.on_device()) {
      if (b.device_id != device_) ThrowInvalid("out: on CUDA device " + std::to_string(b.device_id) +
                                               ", the encoder on device " + std::to_string(device_));
      if (reinterpret_cast<uintptr_t>(b.data) % 16 != 0) ThrowInvalid("out: a device frame must be 16-byte aligned");
      auto f = std::make_shared<DeviceFrame>();
      f->data = b.data;
      f->capacity = b.bytes;
      f->borrowed = b;
      f->memory = std::make_shared<DeviceAllocation>(16, device_, stream);  // the size word
      f->size_word = reinterpret_cast<uint64_t*>(f->memory->data());
      Describe(*f, stream);
      t.frame = f;
      return t;
    }
    // Host memory (pinned or pageable): encode into our scratch frame, then copy.
    if (!scratch_) scratch_ = NewFrame(stream);
    scratch_->Use(stream);
    Describe(*scratch_, stream);
    t.frame = scratch_;
    t.host = b;
    return t;
  }

  py::object Deliver(Target& t, Stream stream) {
    if (!t.host) return py::cast(t.frame);
    const uint64_t n = t.frame->Size();  // rANS: synchronises
    {
      py::gil_scoped_release release;
      ThrowCuda(cudaMemcpyAsync(t.host->data, t.frame->data, n, cudaMemcpyDeviceToHost, stream), "copy the frame to out");
    }
    return py::int_(n);
  }

  template <typename F>
  static double TimeCalls(int repeats, Stream stream, F call) {
    ThrowIfError(call());  // warm-up
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, stream);
    for (int i = 0; i < repeats; ++i) ThrowIfError(call());
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / 1e3 / repeats;
  }
  friend class CudaDecoderPy;

  int device_;
  KvShape shape_{};
  DType dtype_ = DType::kBF16;
  std::unique_ptr<cuda::Encoder> encoder_;
  std::unique_ptr<Workspace> workspace_;
  std::vector<ByteRange> layer_records_;
  FramePtr streaming_;
  FramePtr scratch_;
};

class CudaDecoderPy {
 public:
  CudaDecoderPy(py::handle header, int device) : device_(device) {
    std::vector<uint8_t> bytes;
    if (py::isinstance<DeviceFrame>(header)) {
      FramePtr f = header.cast<FramePtr>();
      device_ = f->device;
      bytes.resize(f->header_bytes);
      DeviceGuard guard(device_);
      py::gil_scoped_release release;
      ThrowCuda(cudaStreamSynchronize(f->stream), "cudaStreamSynchronize");
      ThrowCuda(cudaMemcpy(bytes.data(), f->data, bytes.size(), cudaMemcpyDeviceToHost), "read the frame header");
    } else {
      BytesRef b = ImportBytes(header, false, "header", 0);
      if (b.on_device()) ThrowInvalid("header: pass the frame's first bytes in host memory, or a DeviceFrame");
      bytes.assign(b.data, b.data + b.bytes);
    }
    DeviceGuard guard(device_);
    decoder_ = ValueOrThrow(cuda::Decoder::Create(bytes));
    workspace_ = std::make_unique<Workspace>(decoder_->WorkspaceBytes(), device_);
  }

  void Decode(py::handle frame, py::handle out, py::handle keep_mask, intptr_t stream_int, bool check) {
    const Stream stream = AsStream(stream_int);
    DeviceGuard guard(device_);
    Bytes in = FrameBytes(frame, stream);
    Out o = OutFor(out, stream_int);
    uint8_t* mask = MaskFor(keep_mask, stream_int);
    py::gil_scoped_release release;
    ThrowIfError(decoder_->Decode(in.data, in.bytes, o.view, mask, workspace_->get(), stream));
    ScatterLayers(o, stream);
    if (check) ThrowIfError(decoder_->Check(workspace_->get(), stream));
  }

  void DecodeLayer(int layer, py::handle records, py::handle out, py::handle keep_mask, intptr_t stream_int) {
    const Stream stream = AsStream(stream_int);
    DeviceGuard guard(device_);
    Bytes in = FrameBytes(records, stream);
    KvLayout layout = ImportKv(out, true, decoder_->info().dtype, "out", Memory::kCuda, stream_int);
    CheckOut(layout);
    if (!layout.whole) ThrowNotSupported("decode_layer writes into one 5-D out tensor (layers, 2, kv_heads, tokens, head_dim)");
    uint8_t* mask = MaskFor(keep_mask, stream_int);
    py::gil_scoped_release release;
    ThrowIfError(decoder_->DecodeLayer(layer, in.data, in.bytes, *layout.whole, mask, workspace_->get(), stream));
  }

  void Check(intptr_t stream_int) {
    DeviceGuard guard(device_);
    py::gil_scoped_release release;
    ThrowIfError(decoder_->Check(workspace_->get(), AsStream(stream_int)));
  }

  double NativeSeconds(FramePtr frame, py::handle out, int repeats, intptr_t stream_int) {
    const Stream stream = AsStream(stream_int);
    DeviceGuard guard(device_);
    const uint64_t n = frame->Size();
    KvLayout layout = ImportKv(out, true, decoder_->info().dtype, "out", Memory::kCuda, stream_int);
    CheckOut(layout);
    if (!layout.whole) ThrowNotSupported("native timing takes one 5-D tensor");
    py::gil_scoped_release release;
    return CudaEncoderPy::TimeCalls(repeats, stream, [&] {
      return decoder_->Decode(frame->data, n, *layout.whole, nullptr, workspace_->get(), stream);
    });
  }

  const FrameInfo& info() const { return decoder_->info(); }
  uint64_t header_bytes() const { return decoder_->HeaderBytes(); }
  int device() const { return device_; }

 private:
  struct Bytes {
    const uint8_t* data = nullptr;
    uint64_t bytes = 0;
  };
  struct Out {
    MutableKvView view;
    KvLayout layout;  // per-layer outputs filled from `view` (our scratch)
    bool scatter = false;
  };

  // A device pointer to the frame's bytes: a DeviceFrame, a CUDA buffer, or
  // host bytes copied into our scratch (16-byte aligned, as the kernels need).
  Bytes FrameBytes(py::handle frame, Stream stream) {
    if (py::isinstance<DeviceFrame>(frame)) {
      FramePtr f = frame.cast<FramePtr>();
      if (f->device != device_) ThrowInvalid("frame: on another CUDA device than the decoder");
      f->Use(stream);
      return {f->data, f->Size()};
    }
    BytesRef b = ImportBytes(frame, false, "frame", reinterpret_cast<intptr_t>(stream));
    if (b.on_device()) {
      if (b.device_id != device_) ThrowInvalid("frame: on another CUDA device than the decoder");
      if (b.producer_stream != 0) StreamWaits(stream, AsStream(b.producer_stream == 1 ? 0 : b.producer_stream));
      if (reinterpret_cast<uintptr_t>(b.data) % 16 == 0) return {b.data, b.bytes};
    }
    if (!scratch_ || scratch_->bytes() < b.bytes) scratch_ = std::make_shared<DeviceAllocation>(RoundUp(b.bytes, 256), device_, stream);
    scratch_->Use(stream);
    ThrowCuda(cudaMemcpyAsync(scratch_->data(), b.data, b.bytes, cudaMemcpyDefault, stream), "copy the frame to the device");
    if (!b.on_device()) ThrowCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // the host bytes may go
    return {scratch_->data(), b.bytes};
  }

  void CheckOut(const KvLayout& layout) const {
    const FrameInfo& i = decoder_->info();
    if (!(layout.shape == i.shape) || layout.dtype != i.dtype)
      ThrowInvalid("out: shape/dtype differ from the frame's (" + std::to_string(i.shape.layers) + ", 2, " +
                   std::to_string(i.shape.kv_heads) + ", " + std::to_string(i.shape.tokens) + ", " +
                   std::to_string(i.shape.head_dim) + ") " + std::string(DTypeName(i.dtype)));
    if (LayoutDevice(layout) != device_) ThrowInvalid("out: on another CUDA device than the decoder");
  }

  Out OutFor(py::handle out, intptr_t stream_int) {
    Out o;
    o.layout = ImportKv(out, true, decoder_->info().dtype, "out", Memory::kCuda, stream_int);
    CheckOut(o.layout);
    if (o.layout.whole) {
      o.view = *o.layout.whole;
      return o;
    }
    // Per-layer tensors: decode into one contiguous scratch, then copy.
    const KvShape& s = o.layout.shape;
    const uint64_t bytes = uint64_t{2} * s.layers * s.kv_heads * s.tokens * s.head_dim * DTypeSize(o.layout.dtype);
    if (!layers_scratch_ || layers_scratch_->bytes() < bytes)
      layers_scratch_ = std::make_shared<DeviceAllocation>(bytes, device_, AsStream(stream_int));
    layers_scratch_->Use(AsStream(stream_int));
    o.view = MutableKvView{layers_scratch_->data(), o.layout.dtype, s, KvStrides::Contiguous(s)};
    o.scatter = true;
    for (const TensorRef& r : o.layout.refs)
      if (r.strides.back() != 1) ThrowNotSupported("out: per-layer tensors need a unit head_dim stride");
    return o;
  }

  // Copies the scratch into per-layer outputs (one 2-D copy per head).
  static void ScatterLayers(const Out& o, Stream stream) {
    if (!o.scatter) return;
    const KvShape& s = o.layout.shape;
    const size_t elem = DTypeSize(o.layout.dtype);
    for (int l = 0; l < s.layers; ++l)
      for (int kind = 0; kind < 2; ++kind) {
        const TensorRef& r = o.layout.refs[o.layout.layer_pairs[l].first + kind];
        const int off = r.ndim() == 4 ? 1 : 0;
        const int64_t hs = r.strides[off], ts = r.strides[off + 1];
        for (int h = 0; h < s.kv_heads; ++h) {
          const uint8_t* src = reinterpret_cast<const uint8_t*>(o.view.data) +
                               ((int64_t{l} * 2 + kind) * s.kv_heads + h) * int64_t{s.tokens} * s.head_dim * elem;
          ThrowCuda(cudaMemcpy2DAsync(r.bytes() + h * hs * elem, ts * elem, src, s.head_dim * elem, s.head_dim * elem,
                                      s.tokens, cudaMemcpyDeviceToDevice, stream),
                    "copy a decoded layer");
        }
      }
  }

  uint8_t* MaskFor(py::handle keep_mask, intptr_t stream_int) {
    if (keep_mask.is_none()) return nullptr;
    BytesRef b = ImportBytes(keep_mask, true, "keep_mask", stream_int);
    const KvShape& s = decoder_->info().shape;
    const uint64_t need = uint64_t{2} * s.layers * s.kv_heads * s.tokens;
    if (!b.on_device()) ThrowInvalid("keep_mask: must be a CUDA buffer");
    if (b.bytes != need) ThrowInvalid("keep_mask: " + std::to_string(b.bytes) + " bytes, expected layers*2*kv_heads*tokens = " + std::to_string(need));
    return b.data;
  }

  int device_;
  std::unique_ptr<cuda::Decoder> decoder_;
  std::unique_ptr<Workspace> workspace_;
  std::shared_ptr<DeviceAllocation> scratch_, layers_scratch_;
};

intptr_t StreamArg(py::handle s) {
  if (s.is_none()) return 0;
  if (py::hasattr(s, "cuda_stream")) return s.attr("cuda_stream").cast<intptr_t>();  // torch.cuda.Stream
  if (py::hasattr(s, "ptr")) return s.attr("ptr").cast<intptr_t>();                  // cupy Stream
  return s.cast<intptr_t>();
}

}  // namespace

void RegisterCuda(py::module_& m) {
  m.def("cuda_available", [] { return cuda::Available(); },
        "True when this build has the CUDA codec and a CUDA device is present.");
  m.def("cuda_device_name", [] { return cuda::DeviceName(); });

  py::class_<DeviceFrame, FramePtr>(m, "DeviceFrame",
                                    "An encoded frame in CUDA device memory (from CudaEncoder).")
      .def_property_readonly("nbytes", &DeviceFrame::Size,
                             "The frame's size in bytes. Known without a sync for pack profiles; for rANS "
                             "profiles the first read synchronises the stream that wrote the frame.")
      .def("__len__", &DeviceFrame::Size)
      .def_property_readonly("size_is_static", [](const DeviceFrame& f) { return f.size.has_value(); })
      .def_readonly("capacity", &DeviceFrame::capacity)
      .def_readonly("header_bytes", &DeviceFrame::header_bytes)
      .def_readonly("device", &DeviceFrame::device)
      .def_property_readonly("data_ptr", [](const DeviceFrame& f) { return reinterpret_cast<uintptr_t>(f.data); })
      .def_property_readonly("size_ptr", [](const DeviceFrame& f) { return reinterpret_cast<uintptr_t>(f.size_word); },
                             "Device address of the uint64 frame size the encoder writes (no sync needed to "
                             "read it from a kernel or a device copy).")
      .def("layer_records", [](const DeviceFrame& f, int layer) {
             if (f.layer_records.empty()) ThrowNotSupported("layer_records: record sizes of rANS frames are known only after encoding");
             if (layer < 0 || layer >= static_cast<int>(f.layer_records.size())) ThrowInvalid("layer outside the frame");
             return py::make_tuple(f.layer_records[layer].offset, f.layer_records[layer].bytes);
           }, py::arg("layer"), "(offset, bytes) of one layer's records in the frame (pack profiles).")
      .def_property_readonly("__cuda_array_interface__", [](FramePtr f) {
        py::dict d;
        d["shape"] = py::make_tuple(f->Size());
        d["typestr"] = "|u1";
        d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(f->data), false);
        d["strides"] = py::none();
        d["version"] = 3;
        const intptr_t s = reinterpret_cast<intptr_t>(f->stream);
        d["stream"] = s == 0 ? 1 : s;
        return d;
      })
      .def("__dlpack__", [](FramePtr f, py::object stream, py::kwargs) {
             return FrameCapsule(f, stream.is_none() ? std::nullopt : std::optional<intptr_t>(stream.cast<intptr_t>()));
           }, py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const DeviceFrame& f) { return py::make_tuple(int{kDLCUDA}, f.device); })
      .def("tobytes", [](FramePtr f) {
             const uint64_t n = f->Size();
             std::string out(n, '\0');
             {
               DeviceGuard guard(f->device);
               py::gil_scoped_release release;
               ThrowCuda(cudaStreamSynchronize(f->stream), "cudaStreamSynchronize");
               ThrowCuda(cudaMemcpy(out.data(), f->data, n, cudaMemcpyDeviceToHost), "copy the frame to the host");
             }
             return py::bytes(out);
           }, "Copies the frame to host bytes (synchronises).")
      .def("__bytes__", [](py::object self) { return self.attr("tobytes")(); })
      .def("__repr__", [](FramePtr f) {
        return "<kvserve.DeviceFrame " + (f->size ? std::to_string(*f->size) + " bytes" : std::string("(size on device)")) +
               " on cuda:" + std::to_string(f->device) + ">";
      });

  py::class_<CudaEncoderPy>(m, "CudaEncoder")
      .def(py::init<py::handle, std::vector<int64_t>, py::handle, py::handle, int>(), py::arg("profile"),
           py::arg("shape"), py::arg("dtype"), py::arg("head_scores") = py::none(), py::arg("device") = 0)
      .def("encode", [](CudaEncoderPy& e, py::handle kv, py::handle out, py::handle stream, bool check) {
             return e.Encode(kv, out, StreamArg(stream), check);
           }, py::arg("kv"), py::arg("out") = py::none(), py::arg("stream") = py::none(), py::arg("check") = false)
      .def("begin", [](CudaEncoderPy& e, py::handle out, py::handle stream) { return e.Begin(out, StreamArg(stream)); },
           py::arg("out") = py::none(), py::arg("stream") = py::none())
      .def("encode_layer", [](CudaEncoderPy& e, int layer, py::handle kv, py::handle stream) {
             e.EncodeLayer(layer, kv, StreamArg(stream));
           }, py::arg("layer"), py::arg("kv"), py::arg("stream") = py::none())
      .def("finish", [](CudaEncoderPy& e, py::handle stream, bool check) { return e.Finish(StreamArg(stream), check); },
           py::arg("stream") = py::none(), py::arg("check") = false)
      .def("check", [](CudaEncoderPy& e, py::handle stream) { e.Check(StreamArg(stream)); }, py::arg("stream") = py::none())
      .def("_native_seconds", [](CudaEncoderPy& e, py::handle kv, FramePtr frame, int repeats, py::handle stream) {
             return e.NativeSeconds(kv, frame, repeats, StreamArg(stream));
           }, py::arg("kv"), py::arg("frame"), py::arg("repeats"), py::arg("stream") = py::none())
      .def_property_readonly("max_frame_bytes", &CudaEncoderPy::max_frame_bytes)
      .def_property_readonly("workspace_bytes", &CudaEncoderPy::workspace_bytes)
      .def_property_readonly("frame_size_is_static", &CudaEncoderPy::frame_size_is_static)
      .def_property_readonly("header_bytes", &CudaEncoderPy::header_bytes)
      .def_property_readonly("profile", &CudaEncoderPy::profile)
      .def_property_readonly("device", &CudaEncoderPy::device)
      .def_property_readonly("shape", &CudaEncoderPy::shape)
      .def_property_readonly("dtype", &CudaEncoderPy::dtype);

  py::class_<CudaDecoderPy>(m, "CudaDecoder")
      .def(py::init<py::handle, int>(), py::arg("header"), py::arg("device") = 0)
      .def("decode", [](CudaDecoderPy& d, py::handle frame, py::handle out, py::handle keep_mask, py::handle stream,
                        bool check) { d.Decode(frame, out, keep_mask, StreamArg(stream), check); },
           py::arg("frame"), py::arg("out"), py::arg("keep_mask") = py::none(), py::arg("stream") = py::none(),
           py::arg("check") = false)
      .def("decode_layer", [](CudaDecoderPy& d, int layer, py::handle records, py::handle out, py::handle keep_mask,
                              py::handle stream) { d.DecodeLayer(layer, records, out, keep_mask, StreamArg(stream)); },
           py::arg("layer"), py::arg("records"), py::arg("out"), py::arg("keep_mask") = py::none(),
           py::arg("stream") = py::none())
      .def("check", [](CudaDecoderPy& d, py::handle stream) { d.Check(StreamArg(stream)); }, py::arg("stream") = py::none())
      .def("_native_seconds", [](CudaDecoderPy& d, FramePtr frame, py::handle out, int repeats, py::handle stream) {
             return d.NativeSeconds(frame, out, repeats, StreamArg(stream));
           }, py::arg("frame"), py::arg("out"), py::arg("repeats"), py::arg("stream") = py::none())
      .def_property_readonly("info", &CudaDecoderPy::info)
      .def_property_readonly("header_bytes", &CudaDecoderPy::header_bytes)
      .def_property_readonly("device", &CudaDecoderPy::device);
}

}  // namespace kvserve::python
