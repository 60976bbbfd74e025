// Copyright kvserve authors. Encoder, Decoder, frames and head scores.
//
// Every library call runs with the GIL released; the Python objects it reads
// or writes are kept alive (and their buffers held) by the KvLayout /
// Py_buffer owned by the calling frame, which are released only after the
// GIL is re-acquired.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "held_bytes.h"
#include "kvserve/codec.h"
#include "paged.h"
#include "tensor.h"

namespace kvserve::python {
namespace py = pybind11;
namespace {

// ---------------------------------------------------------------------------
// Output sinks.

// Grows a malloc'ed buffer with realloc (for large frames glibc remaps pages
// instead of copying them) and trims it to the exact size at the end.
class MallocSink final : public ByteSink {
 public:
  explicit MallocSink(size_t initial_capacity) : capacity_(std::max<size_t>(initial_capacity, 4096)) {
    data_ = static_cast<uint8_t*>(std::malloc(capacity_));
  }
  ~MallocSink() override { std::free(data_); }
  Status Append(std::span<const uint8_t> bytes) override {
    if (data_ == nullptr) return Status::ResourceExhausted("out of memory for the frame");
    if (size_ + bytes.size() > capacity_) {
      size_t capacity = capacity_;
      while (size_ + bytes.size() > capacity) capacity *= 2;
      auto* grown = static_cast<uint8_t*>(std::realloc(data_, capacity));
      if (grown == nullptr)
        return Status::ResourceExhausted("out of memory growing the frame to " + std::to_string(capacity) + " bytes");
      data_ = grown;
      capacity_ = capacity;
    }
    std::memcpy(data_ + size_, bytes.data(), bytes.size());
    size_ += bytes.size();
    return Status::Ok();
  }
  // Hands the buffer over, trimmed to size().
  uint8_t* Release() {
    if (size_ < capacity_ && size_ > 0) {
      if (auto* trimmed = static_cast<uint8_t*>(std::realloc(data_, size_))) data_ = trimmed;
    }
    uint8_t* out = data_;
    data_ = nullptr;
    return out;
  }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_;
};

// Writes into a caller-owned buffer; ResourceExhausted when it is too small.
class SpanSink final : public ByteSink {
 public:
  SpanSink(uint8_t* data, size_t capacity) : data_(data), capacity_(capacity) {}
  Status Append(std::span<const uint8_t> bytes) override {
    if (size_ + bytes.size() > capacity_)
      return Status::ResourceExhausted("the frame does not fit the out buffer of " + std::to_string(capacity_) +
                                       " bytes");
    std::memcpy(data_ + size_, bytes.data(), bytes.size());
    size_ += bytes.size();
    return Status::Ok();
  }
  size_t size() const { return size_; }

 private:
  uint8_t* data_;
  size_t capacity_;
  size_t size_ = 0;
};

// ---------------------------------------------------------------------------
// Frame: an encoded frame that owns its bytes and exposes them through the
// buffer protocol (bytes(frame) copies; memoryview(frame) does not).

struct Frame {
  std::unique_ptr<uint8_t, decltype(&std::free)> data{nullptr, &std::free};
  size_t size = 0;
  FrameStats stats;
};

// Views a staged layer's contiguous scratch [2][H][T][D] as a full-shape view
// with layer stride 0.
MutableKvView ScratchView(std::vector<std::byte>& scratch, const KvLayout& layout) {
  const KvShape& s = layout.shape;
  const int64_t per_kind = int64_t{s.kv_heads} * s.tokens * s.head_dim;
  scratch.resize(static_cast<size_t>(2 * per_kind) * DTypeSize(layout.dtype));
  return MutableKvView{scratch.data(), layout.dtype, s,
                       KvStrides{0, per_kind, int64_t{s.tokens} * s.head_dim, s.head_dim, 1}};
}

// Encodes `layout` whole (one view) or layer at a time. Call without the GIL.
Status EncodeLayout(EncoderContext& encoder, const KvLayout& layout, ByteSink& sink) {
  if (layout.whole) return encoder.Encode(layout.whole->AsConst(), sink);
  KVSERVE_RETURN_IF_ERROR(encoder.Begin(layout.shape, layout.dtype, sink));
  std::vector<std::byte> scratch;
  for (int l = 0; l < layout.shape.layers; ++l) {
    if (layout.layer_views[l]) {
      KVSERVE_RETURN_IF_ERROR(encoder.EncodeLayer(l, layout.layer_views[l]->AsConst()));
    } else {
      MutableKvView staged = ScratchView(scratch, layout);
      const auto [k, v] = layout.layer_pairs[l];
      GatherLayer(layout.refs[k], layout.refs[v], layout.shape, DTypeSize(layout.dtype),
                  static_cast<std::byte*>(staged.data));
      KVSERVE_RETURN_IF_ERROR(encoder.EncodeLayer(l, staged.AsConst()));
    }
  }
  return encoder.Finish();
}

py::tuple ShapeTuple(const KvShape& s) { return py::make_tuple(s.layers, s.kv_heads, s.tokens, s.head_dim); }

// ---------------------------------------------------------------------------
// Encoder.

class Encoder {
 public:
  Encoder(Profile profile, int threads, std::shared_ptr<HeadScores> head_scores)
      : head_scores_(std::move(head_scores)) {
    EncodeOptions options;
    options.threads = threads;
    options.head_scores = head_scores_.get();
    context_ = ValueOrThrow(EncoderContext::Create(profile, options));
  }

  py::object Encode(py::handle kv, py::handle out, py::handle dtype) {
    // An engine's pages (PagedKv): gathered by the encoder, same frame.
    std::optional<PagedKvView> pages;
    KvLayout layout;
    if (py::isinstance<PagedKv>(kv)) {
      pages = kv.cast<const PagedKv&>().host_view();
    } else {
      layout = ImportKv(kv, /*writable=*/false, DTypeFromPython(dtype), "kv");
    }
    auto encode = [&](ByteSink& sink) {
      return pages ? context_->Encode(*pages, sink) : EncodeLayout(*context_, layout, sink);
    };
    if (!out.is_none()) {
      Py_buffer view{};
      if (PyObject_GetBuffer(out.ptr(), &view, PyBUF_CONTIG) != 0) {
        py::error_already_set error;
        ThrowInvalid("out: expected a writable C-contiguous buffer (bytearray, numpy array): " +
                     py::str(error.value()).cast<std::string>());
      }
      SpanSink sink(static_cast<uint8_t*>(view.buf), static_cast<size_t>(view.len));
      Status status;
      {
        py::gil_scoped_release release;
        status = encode(sink);
      }
      PyBuffer_Release(&view);
      ThrowIfError(status);
      py::object memory = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(out.ptr()));
      if (!memory) throw py::error_already_set();
      return memory.attr("cast")("B")[py::slice(0, static_cast<py::ssize_t>(sink.size()), 1)];
    }
    // Start at the last frame's size: repeated encodes of similar caches
    // never regrow.
    MallocSink sink(last_frame_bytes_ + last_frame_bytes_ / 8 + 4096);
    Status status;
    {
      py::gil_scoped_release release;
      status = encode(sink);
    }
    ThrowIfError(status);
    auto frame = std::make_unique<Frame>();
    frame->size = sink.size();
    frame->data.reset(sink.Release());
    frame->stats = context_->stats();
    last_frame_bytes_ = frame->size;
    return py::cast(std::move(frame));
  }

  // Streaming. Each call returns the bytes it produced.
  py::bytes Begin(py::tuple shape, py::handle dtype) {
    if (shape.size() != 4) ThrowInvalid("shape: expected (layers, kv_heads, tokens, head_dim)");
    const KvShape s{shape[0].cast<int32_t>(), shape[1].cast<int32_t>(), shape[2].cast<int32_t>(),
                    shape[3].cast<int32_t>()};
    std::optional<DType> d = DTypeFromPython(dtype);
    if (!d) ThrowInvalid("dtype: required ('f32', 'f16' or 'bf16')");
    stream_.clear();
    stream_sink_ = std::make_unique<VectorSink>(&stream_);
    stream_shape_ = s;
    stream_dtype_ = *d;
    Status status;
    {
      py::gil_scoped_release release;
      status = context_->Begin(s, *d, *stream_sink_);
    }
    ThrowIfError(status);
    return TakeStream();
  }

  py::bytes EncodeLayer(int layer, py::handle kv) {
    if (!stream_sink_) ThrowInvalid("encode_layer called before begin");
    if (py::isinstance<PagedKv>(kv)) {  // only layer `layer` of the pages is read
      const PagedKvView pages = kv.cast<const PagedKv&>().host_view();
      Status status;
      {
        py::gil_scoped_release release;
        status = context_->EncodeLayer(layer, pages);
      }
      ThrowIfError(status);
      return TakeStream();
    }
    KvLayout layout;
    if (PyList_Check(kv.ptr()) || PyTuple_Check(kv.ptr())) {
      // One (K, V) pair: a one-layer layout, viewed at layer `layer`.
      py::list one;
      one.append(kv);
      layout = ImportKv(one, false, stream_dtype_, "kv");
      if (layout.shape.kv_heads != stream_shape_.kv_heads || layout.shape.tokens != stream_shape_.tokens ||
          layout.shape.head_dim != stream_shape_.head_dim)
        ThrowInvalid("kv: layer shape differs from the shape given to begin");
      layout.shape = stream_shape_;
      if (layout.whole) {
        layout.whole->shape = stream_shape_;
        layout.whole->strides.layer = 0;
      }
    } else {
      layout = ImportKv(kv, false, stream_dtype_, "kv");
    }
    Status status;
    {
      py::gil_scoped_release release;
      std::vector<std::byte> scratch;
      if (layout.whole) {
        status = context_->EncodeLayer(layer, layout.whole->AsConst());
      } else if (layout.layer_views[0]) {
        MutableKvView view = *layout.layer_views[0];
        view.shape = stream_shape_;
        status = context_->EncodeLayer(layer, view.AsConst());
      } else {
        MutableKvView staged = ScratchView(scratch, layout);
        GatherLayer(layout.refs[0], layout.refs[1], layout.shape, DTypeSize(layout.dtype),
                    static_cast<std::byte*>(staged.data));
        status = context_->EncodeLayer(layer, staged.AsConst());
      }
    }
    ThrowIfError(status);
    return TakeStream();
  }

  py::bytes Finish() {
    if (!stream_sink_) ThrowInvalid("finish called before begin");
    Status status;
    {
      py::gil_scoped_release release;
      status = context_->Finish();
    }
    ThrowIfError(status);
    py::bytes tail = TakeStream();
    stream_sink_.reset();
    return tail;
  }

  const FrameStats& stats() const { return context_->stats(); }
  const Profile& profile() const { return context_->profile(); }

 private:
  py::bytes TakeStream() {
    py::bytes out(reinterpret_cast<const char*>(stream_.data()), stream_.size());
    stream_.clear();
    return out;
  }

  std::shared_ptr<HeadScores> head_scores_;  // outlives context_
  std::unique_ptr<EncoderContext> context_;
  size_t last_frame_bytes_ = 1 << 20;
  std::vector<uint8_t> stream_;
  std::unique_ptr<VectorSink> stream_sink_;
  KvShape stream_shape_;
  DType stream_dtype_ = DType::kF32;
};

// ---------------------------------------------------------------------------
// Decoder.

py::object KeepMaskArray(const std::vector<uint8_t>& mask, const KvShape& s) {
  py::array_t<uint8_t> out({s.layers, 2, s.kv_heads, s.tokens});
  if (mask.size() == static_cast<size_t>(out.size())) {
    std::memcpy(out.mutable_data(), mask.data(), mask.size());
  } else {
    std::memset(out.mutable_data(), 1, static_cast<size_t>(out.size()));
  }
  return out;
}

class Decoder {
 public:
  explicit Decoder(int threads) {
    DecodeOptions options;
    options.threads = threads;
    context_ = ValueOrThrow(DecoderContext::Create(options));
  }

  // Header of `frame` (version, dtype, shape, profile): what an output must
  // look like.
  FrameInfo Header(py::handle frame) {
    HeldBytes bytes(frame, "frame");
    Status status;
    {
      py::gil_scoped_release release;
      status = context_->Start(bytes.span()).status();
    }
    ThrowIfError(status);
    return context_->info();
  }

  py::object Decode(py::handle frame, py::handle out, bool keep_mask, py::handle dtype) {
    HeldBytes bytes(frame, "frame");
    if (py::isinstance<PagedKv>(out)) {  // the receiver's pages, its own block table
      const MutablePagedKvView pages = out.cast<const PagedKv&>().host_mutable_view();
      std::vector<uint8_t> mask;
      Status status;
      {
        py::gil_scoped_release release;
        status = context_->Decode(bytes.span(), pages, keep_mask ? &mask : nullptr);
      }
      ThrowIfError(status);
      if (!keep_mask) return py::none();
      return KeepMaskArray(mask, pages.shape);
    }
    KvLayout layout = ImportKv(out, /*writable=*/true, DTypeFromPython(dtype), "out");
    std::vector<uint8_t> mask;
    Status status;
    if (layout.whole) {
      py::gil_scoped_release release;
      status = context_->Decode(bytes.span(), *layout.whole, keep_mask ? &mask : nullptr);
    } else {
      if (keep_mask)
        ThrowNotSupported("keep_mask with a per-layer out: pass a single 5-D out tensor (or per-layer "
                          "views of one) to get the keep mask");
      py::gil_scoped_release release;
      status = DecodePerLayer(bytes.span(), layout);
    }
    ThrowIfError(status);
    if (!keep_mask) return py::none();
    return KeepMaskArray(mask, layout.shape);
  }

  int64_t Start(py::handle bytes_object) {
    HeldBytes bytes(bytes_object, "bytes");
    Result<size_t> used = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      used = context_->Start(bytes.span());
    }
    return static_cast<int64_t>(ValueOrThrow(std::move(used)));
  }

  int64_t DecodeRecord(py::handle bytes_object, py::handle out) {
    HeldBytes bytes(bytes_object, "bytes");
    if (py::isinstance<PagedKv>(out)) {
      const MutablePagedKvView pages = out.cast<const PagedKv&>().host_mutable_view();
      Result<size_t> used = Status::Internal("unset");
      {
        py::gil_scoped_release release;
        used = context_->DecodeRecord(bytes.span(), pages);
      }
      return static_cast<int64_t>(ValueOrThrow(std::move(used)));
    }
    KvLayout layout = ImportKv(out, true, std::nullopt, "out");
    if (!layout.whole)
      ThrowNotSupported("decode_record needs one strided view of the whole cache as out (a 5-D tensor, or "
                        "per-layer views of one allocation)");
    Result<size_t> used = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      used = context_->DecodeRecord(bytes.span(), *layout.whole);
    }
    return static_cast<int64_t>(ValueOrThrow(std::move(used)));
  }

  const FrameInfo& info() const { return context_->info(); }

 private:
  // Per-layer outputs in separate allocations: walk the chunk table and
  // decode each record into its layer's view (staged layers via scratch).
  Status DecodePerLayer(std::span<const uint8_t> frame, const KvLayout& layout) {
    KVSERVE_ASSIGN_OR_RETURN(FrameInfo table, InspectFrame(frame));
    if (table.shape != layout.shape || table.dtype != layout.dtype)
      return Status::InvalidArgument("out: shape/dtype do not match the frame's");
    KVSERVE_ASSIGN_OR_RETURN(size_t header_bytes, context_->Start(frame));
    (void)header_bytes;
    std::vector<std::vector<std::byte>> scratch(layout.shape.layers);
    for (const ChunkEntry& chunk : table.chunks) {
      if (chunk.layer < 0 || chunk.layer >= layout.shape.layers)
        return Status::Corruption("chunk record names layer " + std::to_string(chunk.layer));
      MutableKvView view = layout.layer_views[chunk.layer] ? *layout.layer_views[chunk.layer]
                                                           : ScratchView(scratch[chunk.layer], layout);
      KVSERVE_ASSIGN_OR_RETURN(size_t used, context_->DecodeRecord(frame.subspan(chunk.offset, chunk.size), view));
      (void)used;
    }
    for (int l = 0; l < layout.shape.layers; ++l) {
      if (layout.layer_views[l]) continue;
      if (scratch[l].empty()) return Status::Corruption("frame has no records for layer " + std::to_string(l));
      const auto [k, v] = layout.layer_pairs[l];
      ScatterLayer(scratch[l].data(), layout.shape, DTypeSize(layout.dtype), layout.refs[k], layout.refs[v]);
    }
    return Status::Ok();
  }

  std::unique_ptr<DecoderContext> context_;
};

std::shared_ptr<HeadScores> HeadScoresFromArray(py::handle scores) {
  auto array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(scores);
  if (!array || array.ndim() != 2) ThrowInvalid("head scores: expected a 2-D (layers, kv_heads) array");
  auto out = std::make_shared<HeadScores>();
  out->layers = static_cast<int>(array.shape(0));
  out->kv_heads = static_cast<int>(array.shape(1));
  out->scores.assign(array.data(), array.data() + array.size());
  return out;
}

}  // namespace

void RegisterCodec(py::module_& m) {
  py::class_<FrameStats>(m, "FrameStats", "Bytes per section of a frame.")
      .def_readonly("header_bytes", &FrameStats::header_bytes)
      .def_readonly("record_header_bytes", &FrameStats::record_header_bytes)
      .def_readonly("transform_bytes", &FrameStats::transform_bytes)
      .def_readonly("param_bytes", &FrameStats::param_bytes)
      .def_readonly("code_bytes", &FrameStats::code_bytes)
      .def_readonly("raw_bytes", &FrameStats::raw_bytes)
      .def_readonly("total_bytes", &FrameStats::total_bytes)
      .def_readonly("chunks", &FrameStats::chunks)
      .def("__repr__", [](const FrameStats& s) {
        return "FrameStats(total_bytes=" + std::to_string(s.total_bytes) + ", chunks=" + std::to_string(s.chunks) + ")";
      });

  py::class_<ChunkEntry>(m, "ChunkEntry", "One chunk record's place in a frame.")
      .def_readonly("offset", &ChunkEntry::offset)
      .def_readonly("size", &ChunkEntry::size)
      .def_readonly("layer", &ChunkEntry::layer)
      .def_readonly("kind", &ChunkEntry::kind)
      .def_readonly("token_begin", &ChunkEntry::token_begin)
      .def_readonly("tokens", &ChunkEntry::tokens)
      .def_readonly("raw", &ChunkEntry::raw);

  py::class_<FrameInfo>(m, "FrameInfo", "A frame's header (and, from inspect(), its chunk table).")
      .def_readonly("version", &FrameInfo::version)
      .def_property_readonly("dtype", [](const FrameInfo& i) { return std::string(DTypeName(i.dtype)); })
      .def_property_readonly("shape", [](const FrameInfo& i) { return ShapeTuple(i.shape); })
      .def_property_readonly("kv_shape", [](const FrameInfo& i) {
        return py::make_tuple(i.shape.layers, 2, i.shape.kv_heads, i.shape.tokens, i.shape.head_dim);
      })
      .def_readonly("profile", &FrameInfo::profile)
      .def_readonly("chunk_count", &FrameInfo::chunk_count)
      .def_readonly("stats", &FrameInfo::stats)
      .def_readonly("chunks", &FrameInfo::chunks)
      .def("__repr__", [](const FrameInfo& i) {
        return "FrameInfo(dtype='" + std::string(DTypeName(i.dtype)) + "', shape=(" + std::to_string(i.shape.layers) +
               ", " + std::to_string(i.shape.kv_heads) + ", " + std::to_string(i.shape.tokens) + ", " +
               std::to_string(i.shape.head_dim) + "), profile='" + i.profile.ToString() + "')";
      });

  py::class_<Frame>(m, "Frame", py::buffer_protocol(),
                    "An encoded frame. Owns its bytes; bytes-like (memoryview(frame) shares them, "
                    "bytes(frame) copies).")
      .def_buffer([](Frame& f) {
        return py::buffer_info(f.data.get(), 1, "B", 1, {static_cast<py::ssize_t>(f.size)}, {1}, /*readonly=*/true);
      })
      .def("__len__", [](const Frame& f) { return f.size; })
      .def("__bytes__", [](const Frame& f) { return py::bytes(reinterpret_cast<const char*>(f.data.get()), f.size); })
      .def("tobytes", [](const Frame& f) { return py::bytes(reinterpret_cast<const char*>(f.data.get()), f.size); })
      .def_readonly("stats", &Frame::stats)
      .def("__eq__", [](const Frame& f, py::handle other) {
             if (!PyObject_CheckBuffer(other.ptr())) return false;
             HeldBytes b(other, "other");
             return b.span().size() == f.size && std::memcmp(b.span().data(), f.data.get(), f.size) == 0;
           }, py::is_operator())
      .def("__repr__", [](const Frame& f) { return "<kvserve.Frame " + std::to_string(f.size) + " bytes>"; });

  py::class_<HeadScores, std::shared_ptr<HeadScores>>(m, "HeadScores",
                                                      "Per-(layer, kv_head) retrieval scores for mixhq and duo.")
      .def(py::init(&HeadScoresFromArray), py::arg("scores"))
      .def_static("load", [](const std::string& path) {
        return std::make_shared<HeadScores>(ValueOrThrow(HeadScores::Load(path)));
      }, py::arg("path"))
      .def("save", [](const HeadScores& h, const std::string& path) { ThrowIfError(h.Save(path)); }, py::arg("path"))
      .def_readonly("layers", &HeadScores::layers)
      .def_readonly("kv_heads", &HeadScores::kv_heads)
      .def_property_readonly("scores", [](const HeadScores& h) {
        py::array_t<float> out({h.layers, h.kv_heads});
        std::memcpy(out.mutable_data(), h.scores.data(), h.scores.size() * sizeof(float));
        return out;
      });

  py::class_<Encoder>(m, "Encoder")
      .def(py::init([](py::handle profile, int threads, py::handle head_scores) {
             Profile p = py::isinstance<Profile>(profile) ? profile.cast<Profile>()
                                                          : ValueOrThrow(Profile::Parse(profile.cast<std::string>()));
             std::shared_ptr<HeadScores> scores;
             if (py::isinstance<HeadScores>(head_scores)) {
               scores = head_scores.cast<std::shared_ptr<HeadScores>>();
             } else if (py::isinstance<py::str>(head_scores)) {
               scores = std::make_shared<HeadScores>(ValueOrThrow(HeadScores::Load(head_scores.cast<std::string>())));
             } else if (!head_scores.is_none()) {
               scores = HeadScoresFromArray(head_scores);
             }
             return std::make_unique<Encoder>(p, threads, scores);
           }),
           py::arg("profile"), py::arg("threads") = 0, py::arg("head_scores") = py::none())
      .def("encode", &Encoder::Encode, py::arg("kv"), py::arg("out") = py::none(), py::arg("dtype") = py::none())
      .def("begin", &Encoder::Begin, py::arg("shape"), py::arg("dtype"))
      .def("encode_layer", &Encoder::EncodeLayer, py::arg("layer"), py::arg("kv"))
      .def("finish", &Encoder::Finish)
      .def_property_readonly("stats", &Encoder::stats)
      .def_property_readonly("profile", &Encoder::profile);

  py::class_<Decoder>(m, "Decoder")
      .def(py::init<int>(), py::arg("threads") = 0)
      .def("header", &Decoder::Header, py::arg("frame"))
      .def("decode", &Decoder::Decode, py::arg("frame"), py::arg("out"), py::arg("keep_mask") = false,
           py::arg("dtype") = py::none())
      .def("start", &Decoder::Start, py::arg("data"))
      .def("decode_record", &Decoder::DecodeRecord, py::arg("data"), py::arg("out"))
      .def_property_readonly("info", &Decoder::info);

  // How `kv` would be read: one strided view, or per layer with some layers
  // staged. For tests and for checking an engine's layout is zero-copy.
  m.def("describe_layout", [](py::handle kv, py::handle dtype) {
    KvLayout layout = ImportKv(kv, false, DTypeFromPython(dtype), "kv");
    py::dict out;
    out["single_view"] = layout.whole.has_value();
    py::list staged;
    for (size_t l = 0; l < layout.layer_views.size(); ++l)
      if (!layout.layer_views[l]) staged.append(l);
    out["staged_layers"] = staged;
    out["shape"] = ShapeTuple(layout.shape);
    out["dtype"] = std::string(DTypeName(layout.dtype));
    if (layout.whole) {
      const KvStrides& st = layout.whole->strides;
      out["strides"] = py::make_tuple(st.layer, st.kind, st.head, st.token, st.dim);
    }
    return out;
  }, py::arg("kv"), py::arg("dtype") = py::none());

  m.def("inspect", [](py::handle frame) {
    HeldBytes bytes(frame, "frame");
    Result<FrameInfo> info = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      info = InspectFrame(bytes.span());
    }
    return ValueOrThrow(std::move(info));
  }, py::arg("frame"));
}

}  // namespace kvserve::python
