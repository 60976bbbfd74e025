// Copyright kvserve authors. KV files and the synthetic generators.
//
// Caches come back as numpy arrays shaped (layers, 2, kv_heads, tokens,
// head_dim) that own the library's KvCache (no copy). numpy has no bfloat16,
// so bf16 caches are uint16 arrays of the raw bits: pass dtype="bf16" when
// encoding them, or view them as torch.bfloat16 (kvserve.as_torch).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "bindings.h"
#include "errors.h"
#include "kvserve/kv_file.h"
#include "tensor.h"

namespace kvserve::python {
namespace py = pybind11;
namespace {

py::dtype NumpyDType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return py::dtype("float32");
    case DType::kF16: return py::dtype("float16");
    case DType::kBF16: return py::dtype("uint16");
  }
  return py::dtype("uint8");
}

py::array CacheToArray(KvCache cache) {
  auto* owned = new KvCache(std::move(cache));
  py::capsule owner(owned, [](void* p) { delete static_cast<KvCache*>(p); });
  const KvShape& s = owned->shape();
  const KvStrides st = KvStrides::Contiguous(s);
  const py::ssize_t elem = static_cast<py::ssize_t>(DTypeSize(owned->dtype()));
  return py::array(NumpyDType(owned->dtype()),
                   std::vector<py::ssize_t>{s.layers, 2, s.kv_heads, s.tokens, s.head_dim},
                   std::vector<py::ssize_t>{st.layer * elem, st.kind * elem, st.head * elem, st.token * elem,
                                            st.dim * elem},
                   owned->bytes(), owner);
}

KvShape ShapeFromPython(py::handle shape, py::handle tokens) {
  KvShape s;
  if (py::isinstance<py::str>(shape)) {
    s = ValueOrThrow(FindSynthShapePreset(shape.cast<std::string>())).shape;
  } else {
    py::tuple t = py::tuple(py::reinterpret_borrow<py::object>(shape));
    if (t.size() != 4) ThrowInvalid("shape: expected a preset name or (layers, kv_heads, tokens, head_dim)");
    s = KvShape{t[0].cast<int32_t>(), t[1].cast<int32_t>(), t[2].cast<int32_t>(), t[3].cast<int32_t>()};
  }
  if (!tokens.is_none()) s.tokens = tokens.cast<int32_t>();
  return s;
}

}  // namespace

void RegisterIo(py::module_& m) {
  m.def("synthesize_kv", [](py::handle shape, py::handle tokens, py::handle dtype, uint64_t seed) {
    SynthOptions options;
    options.shape = ShapeFromPython(shape, tokens);
    options.dtype = DTypeFromPython(dtype).value_or(DType::kBF16);
    options.seed = seed;
    Result<KvCache> cache = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      cache = SynthesizeKv(options);
    }
    return CacheToArray(ValueOrThrow(std::move(cache)));
  }, py::arg("shape") = "small", py::arg("tokens") = py::none(), py::arg("dtype") = "bf16", py::arg("seed") = 1);

  m.def("synth_shapes", [] {
    py::dict out;
    for (const auto& p : SynthShapePresets())
      out[py::str(std::string(p.name))] = py::make_tuple(p.shape.layers, p.shape.kv_heads, p.shape.tokens,
                                                         p.shape.head_dim);
    return out;
  });

  m.def("synthesize_head_scores", [](int layers, int kv_heads, uint64_t seed) {
    return std::make_shared<HeadScores>(SynthesizeHeadScores(layers, kv_heads, seed));
  }, py::arg("layers"), py::arg("kv_heads"), py::arg("seed") = 1);

  m.def("load_kv_file", [](const std::string& path) {
    KvFileMetadata metadata;
    Result<KvCache> cache = Status::Internal("unset");
    {
      py::gil_scoped_release release;
      cache = LoadKvFile(path, &metadata);
    }
    py::array array = CacheToArray(ValueOrThrow(std::move(cache)));
    return py::make_tuple(array, metadata);
  }, py::arg("path"));

  m.def("save_kv_file", [](const std::string& path, py::handle kv, const KvFileMetadata& metadata, py::handle dtype) {
    KvLayout layout = ImportKv(kv, false, DTypeFromPython(dtype), "kv");
    if (!layout.whole) ThrowNotSupported("save_kv_file needs one strided view (a 5-D tensor)");
    Status status;
    {
      py::gil_scoped_release release;
      status = SaveKvFile(path, layout.whole->AsConst(), metadata);
    }
    ThrowIfError(status);
  }, py::arg("path"), py::arg("kv"), py::arg("metadata") = KvFileMetadata{}, py::arg("dtype") = py::none());
}

}  // namespace kvserve::python
