// Copyright kvserve authors.
#include "tensor.h"

#include <dlpack/dlpack.h>

#include <cstring>
#include <string_view>

#include "errors.h"

namespace kvserve::python {
namespace py = pybind11;
namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

std::string TypeName(py::handle object) {
  return py::str(py::type::handle_of(object).attr("__name__")).cast<std::string>();
}

// Buffer-protocol element type -> DType. 2-byte integers need an override
// (numpy carries bf16 as uint16).
DType BufferDType(const Py_buffer& view, std::optional<DType> dtype_override,
                  const std::string& what) {
  std::string_view format = view.format != nullptr ? view.format : "B";
  while (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) {
    format.remove_prefix(1);
  }
  if (!format.empty() && (format[0] == '>' || format[0] == '!'))
    ThrowInvalid(what + ": big-endian element type '" + std::string(view.format) +
                 "' is not supported");
  std::optional<DType> found;
  if (format == "f" && view.itemsize == 4) found = DType::kF32;
  if (format == "e" && view.itemsize == 2) found = DType::kF16;
  const bool two_byte_int = (format == "H" || format == "h") && view.itemsize == 2;
  if (dtype_override) {
    if ((found && *found != *dtype_override) ||
        (!found && !(two_byte_int && DTypeSize(*dtype_override) == 2)))
      ThrowInvalid(what + ": dtype=" + std::string(DTypeName(*dtype_override)) +
                   " does not match the buffer's element type '" + std::string(format) + "'");
    return *dtype_override;
  }
  if (found) return *found;
  if (two_byte_int)
    ThrowInvalid(what + ": 16-bit integer elements: pass dtype='bf16' (or 'f16') to say what "
                 "they hold");
  ThrowInvalid(what + ": unsupported element type '" + std::string(format) + "' (itemsize " +
               std::to_string(view.itemsize) + "); kvserve takes float32, float16 and bfloat16");
}

TensorRef FromBuffer(py::handle object, bool writable, std::optional<DType> dtype_override,
                     const std::string& what) {
  auto* view = new Py_buffer;
  const int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(object.ptr(), view, flags) != 0) {
    delete view;
    py::error_already_set error;
    ThrowInvalid(what + ": " + (writable ? "need a writable buffer: " : "") +
                 py::str(error.value()).cast<std::string>());
  }
  TensorRef ref;
  ref.owner = std::shared_ptr<void>(view, [](void* p) {
    auto* v = static_cast<Py_buffer*>(p);
    PyBuffer_Release(v);
    delete v;
  });
  ref.dtype = BufferDType(*view, dtype_override, what);
  ref.data = view->buf;
  for (int i = 0; i < view->ndim; ++i) {
    ref.shape.push_back(view->shape[i]);
    const Py_ssize_t stride = view->strides[i];
    if (stride < 0 || stride % view->itemsize != 0)
      ThrowInvalid(what + ": axis " + std::to_string(i) + " has byte stride " +
                   std::to_string(stride) +
                   "; kvserve views need non-negative strides that are a multiple of the "
                   "element size");
    ref.strides.push_back(stride / view->itemsize);
  }
  return ref;
}

struct ConsumedCapsule {
  py::object capsule;
  DLManagedTensor* managed;
  ~ConsumedCapsule() {
    // DLPack: the consumer renames the capsule and owns the deleter call.
    PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName);
    if (managed->deleter != nullptr) managed->deleter(managed);
  }
};

// Refuses memory of DLPack device type `type` where `memory` is wanted.
void CheckDevice(int type, Memory memory, const std::string& what) {
  if (memory == Memory::kCuda) {
    if (type != kDLCUDA)
      ThrowInvalid(what + ": expected CUDA device memory, got DLPack device type " +
                   std::to_string(type) + " (1 = CPU, 2 = CUDA, 3 = CUDA pinned host); the CUDA "
                   "codec reads and writes device memory: move the tensor with .cuda() or use "
                   "the CPU Encoder/Decoder");
    return;
  }
  if (type != kDLCPU && type != kDLCUDAHost)
    ThrowNotSupported(what + ": a tensor on DLPack device type " + std::to_string(type) +
                      " (2 = CUDA) goes through the CUDA codec (kvserve.CudaEncoder / "
                      "CudaDecoder, or kvserve.encode/decode of a CUDA tensor), not this CPU "
                      "entry point");
}

// __cuda_array_interface__ (versions 2 and 3): data pointer, typestr, shape,
// byte strides (None = C-contiguous), optional stream.
TensorRef FromCudaArrayInterface(py::handle object, bool writable,
                                 std::optional<DType> dtype_override, const std::string& what) {
  py::dict cai = object.attr("__cuda_array_interface__");
  TensorRef ref;
  ref.owner = std::shared_ptr<void>(new py::object(py::reinterpret_borrow<py::object>(object)),
                                    [](void* p) { delete static_cast<py::object*>(p); });
  py::tuple data = cai["data"];
  ref.data = reinterpret_cast<void*>(data[0].cast<uintptr_t>());
  if (writable && data[1].cast<bool>()) ThrowInvalid(what + ": the CUDA array is read-only");
  const std::string typestr = cai["typestr"].cast<std::string>();
  std::optional<DType> found;
  if (typestr == "<f4") found = DType::kF32;
  if (typestr == "<f2") found = DType::kF16;
  const bool two_byte = typestr == "<u2" || typestr == "<i2" || typestr == "|V2" || typestr == "<V2";
  if (dtype_override) {
    if ((found && *found != *dtype_override) || (!found && !(two_byte && DTypeSize(*dtype_override) == 2)))
      ThrowInvalid(what + ": dtype=" + std::string(DTypeName(*dtype_override)) +
                   " does not match the CUDA array's typestr '" + typestr + "'");
    found = dtype_override;
  }
  if (!found)
    ThrowInvalid(what + ": unsupported CUDA array typestr '" + typestr + "'" +
                 (two_byte ? "; pass dtype='bf16' (or 'f16') to say what its 16-bit elements hold"
                           : "; kvserve takes float32, float16 and bfloat16"));
  ref.dtype = *found;
  const int64_t elem = static_cast<int64_t>(DTypeSize(ref.dtype));
  for (py::handle n : py::tuple(cai["shape"])) ref.shape.push_back(n.cast<int64_t>());
  ref.strides.resize(ref.shape.size());
  if (!cai.contains("strides") || cai["strides"].is_none()) {
    int64_t compact = 1;
    for (int i = ref.ndim() - 1; i >= 0; --i) {
      ref.strides[i] = compact;
      compact *= ref.shape[i];
    }
  } else {
    py::tuple strides = cai["strides"];
    for (int i = 0; i < ref.ndim(); ++i) {
      const int64_t b = strides[i].cast<int64_t>();
      if (b < 0 || b % elem != 0)
        ThrowInvalid(what + ": axis " + std::to_string(i) + " has byte stride " + std::to_string(b) +
                     "; kvserve views need non-negative strides that are a multiple of the element size");
      ref.strides[i] = b / elem;
    }
  }
  if (cai.contains("stream") && !cai["stream"].is_none()) ref.producer_stream = cai["stream"].cast<intptr_t>();
  py::object torch_device = py::getattr(object, "device", py::none());
  if (py::hasattr(torch_device, "index") && !torch_device.attr("index").is_none())
    ref.device_id = torch_device.attr("index").cast<int>();
  return ref;
}

TensorRef FromCapsule(py::object capsule, std::optional<DType> dtype_override,
                      const std::string& what, Memory memory) {
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName))
    ThrowInvalid(what + ": not a DLPack capsule named \"dltensor\" (a capsule can be consumed "
                        "only once)");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  TensorRef ref;
  ref.owner = std::shared_ptr<ConsumedCapsule>(new ConsumedCapsule{capsule, managed});
  const DLTensor& t = managed->dl_tensor;
  CheckDevice(t.device.device_type, memory, what);
  ref.device_id = t.device.device_id;
  std::optional<DType> dtype;
  if (t.dtype.lanes == 1) {
    if (t.dtype.code == kDLFloat && t.dtype.bits == 32) dtype = DType::kF32;
    if (t.dtype.code == kDLFloat && t.dtype.bits == 16) dtype = DType::kF16;
    if (t.dtype.code == kDLBfloat && t.dtype.bits == 16) dtype = DType::kBF16;
    if (t.dtype.code == kDLUInt && t.dtype.bits == 16 && dtype_override &&
        DTypeSize(*dtype_override) == 2)
      dtype = dtype_override;
  }
  if (!dtype)
    ThrowInvalid(what + ": unsupported DLPack dtype (code " + std::to_string(t.dtype.code) +
                 ", bits " + std::to_string(t.dtype.bits) + ", lanes " +
                 std::to_string(t.dtype.lanes) + "); kvserve takes float32, float16 and bfloat16");
  if (dtype_override && *dtype_override != *dtype)
    ThrowInvalid(what + ": dtype=" + std::string(DTypeName(*dtype_override)) +
                 " does not match the tensor's " + std::string(DTypeName(*dtype)));
  ref.dtype = *dtype;
  ref.data = static_cast<std::byte*>(t.data) + t.byte_offset;
  int64_t compact = 1;
  ref.shape.assign(t.shape, t.shape + t.ndim);
  ref.strides.resize(t.ndim);
  for (int i = t.ndim - 1; i >= 0; --i) {
    ref.strides[i] = t.strides != nullptr ? t.strides[i] : compact;
    compact *= t.shape[i];
    if (ref.strides[i] < 0)
      ThrowInvalid(what + ": axis " + std::to_string(i) + " has negative stride " +
                   std::to_string(ref.strides[i]) + "; kvserve views need non-negative strides");
  }
  return ref;
}

// Element-stride view of a per-layer tensor (kv_heads, tokens, head_dim),
// after dropping a leading batch axis of size 1.
struct LayerTensor {
  int64_t shape[3];
  int64_t strides[3];
};

LayerTensor AsLayerTensor(const TensorRef& ref, const std::string& what) {
  int offset = 0;
  if (ref.ndim() == 4) {
    if (ref.shape[0] != 1)
      ThrowInvalid(what + ": batch axis of size " + std::to_string(ref.shape[0]) +
                   "; kvserve encodes one sequence: pass a (1, kv_heads, tokens, head_dim) or "
                   "(kv_heads, tokens, head_dim) tensor, e.g. key[i] or key[i:i+1]");
    offset = 1;
  } else if (ref.ndim() != 3) {
    ThrowInvalid(what + ": expected a (kv_heads, tokens, head_dim) or (1, kv_heads, tokens, "
                        "head_dim) tensor, got " + std::to_string(ref.ndim()) + " dimensions");
  }
  LayerTensor t;
  for (int i = 0; i < 3; ++i) {
    t.shape[i] = ref.shape[offset + i];
    t.strides[i] = ref.strides[offset + i];
  }
  return t;
}

int32_t CheckedDim(int64_t n, const char* axis, const std::string& what) {
  if (n <= 0 || n > INT32_MAX)
    ThrowInvalid(what + ": " + axis + " = " + std::to_string(n) + " must be in [1, 2^31)");
  return static_cast<int32_t>(n);
}

void CopyStrided3D(const std::byte* src, const int64_t src_strides[3], std::byte* dst,
                   const int64_t dst_strides[3], const KvShape& s, size_t elem) {
  for (int h = 0; h < s.kv_heads; ++h)
    for (int t = 0; t < s.tokens; ++t) {
      const std::byte* from = src + (h * src_strides[0] + t * src_strides[1]) * int64_t(elem);
      std::byte* to = dst + (h * dst_strides[0] + t * dst_strides[1]) * int64_t(elem);
      if (src_strides[2] == 1 && dst_strides[2] == 1) {
        std::memcpy(to, from, elem * s.head_dim);
      } else {
        for (int d = 0; d < s.head_dim; ++d)
          std::memcpy(to + d * dst_strides[2] * int64_t(elem), from + d * src_strides[2] * int64_t(elem),
                      elem);
      }
    }
}

}  // namespace

std::optional<DType> DTypeFromPython(py::handle dtype) {
  if (dtype.is_none()) return std::nullopt;
  std::string name;
  if (PyType_Check(dtype.ptr())) {
    name = py::str(dtype.attr("__name__")).cast<std::string>();  // numpy.float16
  } else {
    name = py::str(dtype).cast<std::string>();  // "bf16", np.dtype, torch.bfloat16
  }
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  return ValueOrThrow(ParseDType(name));
}

TensorRef ImportTensor(py::handle object, bool writable, std::optional<DType> dtype_override,
                       const std::string& what, Memory memory, intptr_t stream) {
  if (PyCapsule_CheckExact(object.ptr()))
    return FromCapsule(py::reinterpret_borrow<py::object>(object), dtype_override, what, memory);
  if (memory == Memory::kHost && PyObject_CheckBuffer(object.ptr()))
    return FromBuffer(object, writable, dtype_override, what);
  if (py::hasattr(object, "__dlpack__")) {
    if (py::hasattr(object, "__dlpack_device__")) {
      py::tuple device = object.attr("__dlpack_device__")();
      const int type = device[0].cast<int>();
      CheckDevice(type, memory, what);
      if (type == kDLCUDA) {
        // DLPack: 1 names the legacy default stream (0 is reserved).
        const intptr_t s = stream == 0 ? 1 : stream;
        return FromCapsule(object.attr("__dlpack__")(py::arg("stream") = s), dtype_override, what,
                           memory);
      }
    }
    return FromCapsule(object.attr("__dlpack__")(), dtype_override, what, memory);
  }
  if (memory == Memory::kCuda && py::hasattr(object, "__cuda_array_interface__"))
    return FromCudaArrayInterface(object, writable, dtype_override, what);
  if (memory == Memory::kCuda && PyObject_CheckBuffer(object.ptr()))
    CheckDevice(kDLCPU, memory, what);
  ThrowInvalid(what + ": expected " +
               (memory == Memory::kCuda ? std::string("a CUDA tensor (torch, or an object with __dlpack__ or "
                                                      "__cuda_array_interface__) or a DLPack capsule")
                                        : std::string("a numpy array, a torch tensor, an object with "
                                                      "__dlpack__ or a DLPack capsule")) +
               "; got " + TypeName(object));
}

BytesRef ImportBytes(py::handle object, bool writable, const std::string& what, intptr_t stream) {
  BytesRef ref;
  auto contiguous = [&](const std::vector<int64_t>& shape, const std::vector<int64_t>& strides_bytes,
                        int64_t elem) {
    int64_t expect = elem;
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
      if (shape[i] != 1 && strides_bytes[i] != expect)
        ThrowInvalid(what + ": the buffer must be C-contiguous");
      expect *= shape[i];
    }
    return expect;  // total bytes
  };
  if (!PyCapsule_CheckExact(object.ptr()) && PyObject_CheckBuffer(object.ptr())) {
    auto* view = new Py_buffer;
    const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object.ptr(), view, flags) != 0) {
      delete view;
      py::error_already_set error;
      ThrowInvalid(what + ": " + py::str(error.value()).cast<std::string>());
    }
    ref.owner = std::shared_ptr<void>(view, [](void* p) {
      auto* v = static_cast<Py_buffer*>(p);
      PyBuffer_Release(v);
      delete v;
    });
    ref.data = static_cast<uint8_t*>(view->buf);
    ref.bytes = static_cast<uint64_t>(view->len);
    return ref;
  }
  py::object capsule;
  if (PyCapsule_CheckExact(object.ptr())) {
    capsule = py::reinterpret_borrow<py::object>(object);
  } else if (py::hasattr(object, "__dlpack__")) {
    int type = kDLCPU;
    if (py::hasattr(object, "__dlpack_device__"))
      type = py::tuple(object.attr("__dlpack_device__")())[0].cast<int>();
    capsule = type == kDLCUDA ? object.attr("__dlpack__")(py::arg("stream") = stream == 0 ? 1 : stream)
                              : object.attr("__dlpack__")();
  } else if (py::hasattr(object, "__cuda_array_interface__")) {
    py::dict cai = object.attr("__cuda_array_interface__");
    py::tuple data = cai["data"];
    if (writable && data[1].cast<bool>()) ThrowInvalid(what + ": the CUDA array is read-only");
    const std::string typestr = cai["typestr"].cast<std::string>();
    const int64_t elem = typestr.size() > 2 ? std::stoll(typestr.substr(2)) : 1;
    std::vector<int64_t> shape, strides;
    for (py::handle n : py::tuple(cai["shape"])) shape.push_back(n.cast<int64_t>());
    strides.resize(shape.size());
    if (!cai.contains("strides") || cai["strides"].is_none()) {
      int64_t compact = elem;
      for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
        strides[i] = compact;
        compact *= shape[i];
      }
    } else {
      py::tuple st = cai["strides"];
      for (size_t i = 0; i < shape.size(); ++i) strides[i] = st[i].cast<int64_t>();
    }
    ref.data = reinterpret_cast<uint8_t*>(data[0].cast<uintptr_t>());
    ref.bytes = static_cast<uint64_t>(contiguous(shape, strides, elem));
    ref.device_type = kDLCUDA;
    if (cai.contains("stream") && !cai["stream"].is_none()) ref.producer_stream = cai["stream"].cast<intptr_t>();
    ref.owner = std::shared_ptr<void>(new py::object(py::reinterpret_borrow<py::object>(object)),
                                      [](void* p) { delete static_cast<py::object*>(p); });
    return ref;
  } else {
    ThrowInvalid(what + ": expected a bytes-like object, a CUDA buffer (torch tensor, __dlpack__ or "
                        "__cuda_array_interface__) or a DLPack capsule; got " + TypeName(object));
  }
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName))
    ThrowInvalid(what + ": not a DLPack capsule named \"dltensor\" (a capsule can be consumed only once)");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  ref.owner = std::shared_ptr<ConsumedCapsule>(new ConsumedCapsule{capsule, managed});
  const DLTensor& t = managed->dl_tensor;
  const int64_t elem = (int64_t{t.dtype.bits} * t.dtype.lanes + 7) / 8;
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim), strides(t.ndim);
  int64_t compact = elem;
  for (int i = t.ndim - 1; i >= 0; --i) {
    strides[i] = t.strides != nullptr ? t.strides[i] * elem : compact;
    compact *= t.shape[i];
  }
  ref.bytes = static_cast<uint64_t>(contiguous(shape, strides, elem));
  ref.data = static_cast<uint8_t*>(t.data) + t.byte_offset;
  ref.device_type = t.device.device_type;
  ref.device_id = t.device.device_id;
  return ref;
}

bool KvLayout::AnyStaged() const {
  for (const auto& v : layer_views)
    if (!v) return true;
  return false;
}

KvLayout ImportKv(py::handle kv, bool writable, std::optional<DType> dtype_override,
                  const std::string& what, Memory memory, intptr_t stream) {
  KvLayout layout;
  if (!PyList_Check(kv.ptr()) && !PyTuple_Check(kv.ptr())) {
    TensorRef ref = ImportTensor(kv, writable, dtype_override, what, memory, stream);
    if (ref.ndim() != 5 || ref.shape[1] != 2)
      ThrowInvalid(what + ": expected a 5-D tensor (layers, 2, kv_heads, tokens, head_dim) or "
                          "a sequence of per-layer (K, V) pairs; got a tensor with " +
                   std::to_string(ref.ndim()) + " dimensions" +
                   (ref.ndim() == 5 ? " whose axis 1 is " + std::to_string(ref.shape[1]) : ""));
    layout.dtype = ref.dtype;
    layout.shape = KvShape{CheckedDim(ref.shape[0], "layers", what),
                           CheckedDim(ref.shape[2], "kv_heads", what),
                           CheckedDim(ref.shape[3], "tokens", what),
                           CheckedDim(ref.shape[4], "head_dim", what)};
    layout.whole = MutableKvView{
        ref.data, ref.dtype, layout.shape,
        KvStrides{ref.strides[0], ref.strides[1], ref.strides[2], ref.strides[3], ref.strides[4]}};
    layout.refs.push_back(std::move(ref));
    return layout;
  }

  py::sequence layers = py::reinterpret_borrow<py::sequence>(kv);
  const size_t num_layers = layers.size();
  if (num_layers == 0) ThrowInvalid(what + ": empty sequence of layers");
  std::vector<LayerTensor> tensors;
  for (size_t l = 0; l < num_layers; ++l) {
    py::handle pair = layers[l];
    const std::string where = what + "[" + std::to_string(l) + "]";
    if (!PySequence_Check(pair.ptr()) || PySequence_Size(pair.ptr()) != 2 ||
        PyObject_CheckBuffer(pair.ptr()) || py::hasattr(pair, "__dlpack__"))
      ThrowInvalid(where + ": expected a (K, V) pair of tensors");
    py::sequence kv_pair = py::reinterpret_borrow<py::sequence>(pair);
    for (int kind = 0; kind < 2; ++kind) {
      const std::string name = where + (kind == 0 ? ".K" : ".V");
      layout.refs.push_back(ImportTensor(kv_pair[kind], writable, dtype_override, name, memory, stream));
      tensors.push_back(AsLayerTensor(layout.refs.back(), name));
    }
    layout.layer_pairs.emplace_back(static_cast<int>(2 * l), static_cast<int>(2 * l + 1));
  }
  const TensorRef& first = layout.refs[0];
  const LayerTensor& t0 = tensors[0];
  layout.dtype = first.dtype;
  layout.shape = KvShape{CheckedDim(static_cast<int64_t>(num_layers), "layers", what),
                         CheckedDim(t0.shape[0], "kv_heads", what),
                         CheckedDim(t0.shape[1], "tokens", what),
                         CheckedDim(t0.shape[2], "head_dim", what)};
  const int64_t elem = static_cast<int64_t>(DTypeSize(layout.dtype));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name =
        what + "[" + std::to_string(i / 2) + "]" + (i % 2 == 0 ? ".K" : ".V");
    if (layout.refs[i].device_id != first.device_id)
      ThrowInvalid(name + ": on CUDA device " + std::to_string(layout.refs[i].device_id) +
                   ", layer 0's K on device " + std::to_string(first.device_id));
    if (layout.refs[i].dtype != layout.dtype)
      ThrowInvalid(name + ": dtype " + std::string(DTypeName(layout.refs[i].dtype)) +
                   " differs from layer 0's " + std::string(DTypeName(layout.dtype)));
    for (int a = 0; a < 3; ++a)
      if (tensors[i].shape[a] != t0.shape[a])
        ThrowInvalid(name + ": shape differs from layer 0's K (every K and V must be "
                            "(kv_heads, tokens, head_dim) alike)");
  }

  // Byte offset from `from` to `to` as a non-negative element count, if any.
  auto element_offset = [&](const TensorRef& from, const TensorRef& to) -> std::optional<int64_t> {
    const auto diff = reinterpret_cast<intptr_t>(to.data) - reinterpret_cast<intptr_t>(from.data);
    if (diff < 0 || diff % elem != 0) return std::nullopt;
    return diff / elem;
  };
  auto same_strides = [&](size_t a, size_t b) {
    return std::memcmp(tensors[a].strides, tensors[b].strides, sizeof(tensors[a].strides)) == 0;
  };
  // One view for everything: equal strides, constant kind and layer offsets.
  std::optional<int64_t> kind_stride = element_offset(layout.refs[0], layout.refs[1]);
  std::optional<int64_t> layer_stride =
      num_layers > 1 ? element_offset(layout.refs[0], layout.refs[2]) : std::optional<int64_t>(0);
  bool single = kind_stride && layer_stride;
  for (size_t l = 0; single && l < num_layers; ++l) {
    auto k_off = element_offset(layout.refs[0], layout.refs[2 * l]);
    auto v_off = element_offset(layout.refs[0], layout.refs[2 * l + 1]);
    single = same_strides(0, 2 * l) && same_strides(0, 2 * l + 1) && k_off && v_off &&
             *k_off == int64_t(l) * *layer_stride && *v_off == *k_off + *kind_stride;
  }
  if (single) {
    layout.whole = MutableKvView{first.data, layout.dtype, layout.shape,
                                 KvStrides{*layer_stride, *kind_stride, t0.strides[0],
                                           t0.strides[1], t0.strides[2]}};
    return layout;
  }
  for (size_t l = 0; l < num_layers; ++l) {
    const TensorRef& k = layout.refs[2 * l];
    const TensorRef& v = layout.refs[2 * l + 1];
    std::optional<int64_t> kind = element_offset(k, v);
    if (!kind && memory == Memory::kCuda) {  // CUDA views allow a negative kind stride
      const auto diff = reinterpret_cast<intptr_t>(v.data) - reinterpret_cast<intptr_t>(k.data);
      if (diff % elem == 0) kind = diff / elem;
    }
    if (kind && same_strides(2 * l, 2 * l + 1)) {
      const LayerTensor& t = tensors[2 * l];
      layout.layer_views.push_back(MutableKvView{
          k.data, layout.dtype, layout.shape,
          KvStrides{0, *kind, t.strides[0], t.strides[1], t.strides[2]}});
    } else {
      layout.layer_views.push_back(std::nullopt);
    }
  }
  return layout;
}

void GatherLayer(const TensorRef& k, const TensorRef& v, const KvShape& shape, size_t elem,
                 std::byte* contiguous) {
  const int64_t dense[3] = {int64_t{shape.tokens} * shape.head_dim, shape.head_dim, 1};
  const int64_t kind_bytes = int64_t{shape.kv_heads} * shape.tokens * shape.head_dim * elem;
  const TensorRef* refs[2] = {&k, &v};
  for (int kind = 0; kind < 2; ++kind) {
    const LayerTensor t = AsLayerTensor(*refs[kind], "");
    CopyStrided3D(refs[kind]->bytes(), t.strides, contiguous + kind * kind_bytes, dense, shape,
                  elem);
  }
}

void ScatterLayer(const std::byte* contiguous, const KvShape& shape, size_t elem,
                  const TensorRef& k, const TensorRef& v) {
  const int64_t dense[3] = {int64_t{shape.tokens} * shape.head_dim, shape.head_dim, 1};
  const int64_t kind_bytes = int64_t{shape.kv_heads} * shape.tokens * shape.head_dim * elem;
  const TensorRef* refs[2] = {&k, &v};
  for (int kind = 0; kind < 2; ++kind) {
    const LayerTensor t = AsLayerTensor(*refs[kind], "");
    CopyStrided3D(contiguous + kind * kind_bytes, dense, refs[kind]->bytes(), t.strides, shape,
                  elem);
  }
}

}  // namespace kvserve::python
