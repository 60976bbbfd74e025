// Copyright kvserve authors. kvserve.PagedKv (python/src/paged.h): per-layer
// paged caches borrowed in place, with the request's block table.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "paged.h"

namespace kvserve::python {
namespace py = pybind11;
namespace {

// Axis positions of (kind, block, slot, head, dim) in one layer's tensor.
struct Axes {
  int kind, block, slot, head, dim;
};

Axes AxesOf(PagedLayout layout) {
  switch (layout) {
    case PagedLayout::kVllm:
      return {0, 1, 2, 3, 4};  // [2, blocks, slots, heads, dim]
    case PagedLayout::kVllmBlockFirst:
    case PagedLayout::kFlashInferNhd:
      return {1, 0, 2, 3, 4};  // [blocks, 2, slots, heads, dim]
    case PagedLayout::kFlashInferHnd:
      return {1, 0, 3, 2, 4};  // [blocks, 2, heads, slots, dim]
  }
  return {0, 1, 2, 3, 4};
}

std::string ShapeText(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

}  // namespace

PagedKv::PagedKv(py::handle layers, const std::string& layout, py::handle block_table,
                 int64_t tokens, py::handle dtype, bool writable)
    : writable_(writable) {
  layout_ = ValueOrThrow(ParsePagedLayout(layout));
  const std::optional<DType> dtype_override = DTypeFromPython(dtype);
  // The layer tensors: a sequence, or one tensor whose axis 0 is the layer.
  std::vector<TensorRef> per_layer;
  if (PyList_Check(layers.ptr()) || PyTuple_Check(layers.ptr())) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(layers);
    for (size_t l = 0; l < seq.size(); ++l)
      per_layer.push_back(
          ImportTensor(seq[l], writable, dtype_override, "layers[" + std::to_string(l) + "]"));
  } else {
    TensorRef all = ImportTensor(layers, writable, dtype_override, "layers");
    if (all.ndim() != 6)
      ThrowInvalid(
          "layers: expected a sequence of 5-D per-layer caches or one 6-D tensor "
          "(layers first), got shape " +
          ShapeText(all.shape));
    for (int64_t l = 0; l < all.shape[0]; ++l) {
      TensorRef one = all;
      one.data = all.bytes() + l * all.strides[0] * static_cast<int64_t>(DTypeSize(all.dtype));
      one.shape.erase(one.shape.begin());
      one.strides.erase(one.strides.begin());
      per_layer.push_back(std::move(one));
    }
  }
  if (per_layer.empty()) ThrowInvalid("layers: no layer caches given");
  const TensorRef& first = per_layer.front();
  if (first.ndim() != 5)
    ThrowInvalid("layers[0]: a " + std::string(PagedLayoutName(layout_)) +
                 " layer cache is 5-D, got shape " + ShapeText(first.shape));
  for (size_t l = 1; l < per_layer.size(); ++l)
    if (per_layer[l].shape != first.shape || per_layer[l].strides != first.strides ||
        per_layer[l].dtype != first.dtype)
      ThrowInvalid("layers[" + std::to_string(l) +
                   "]: shape, strides or dtype differ from layer 0's");
  const Axes a = AxesOf(layout_);
  if (first.shape[a.kind] != 2)
    ThrowInvalid("layers[0]: the K/V axis of a " + std::string(PagedLayoutName(layout_)) +
                 " cache has size 2, shape is " + ShapeText(first.shape));
  if (first.strides[a.dim] != 1 && first.shape[a.dim] != 1)
    ThrowInvalid("layers[0]: head_dim must be the contiguous axis (stride 1)");

  const size_t es = DTypeSize(first.dtype);
  for (const TensorRef& ref : per_layer) {
    keys_.push_back(ref.data);
    values_.push_back(ref.bytes() + first.strides[a.kind] * static_cast<int64_t>(es));
  }
  refs_ = std::move(per_layer);

  auto table = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(block_table);
  if (!table || table.ndim() != 1)
    ThrowInvalid("block_table: expected a 1-D sequence of block ids");
  table_.assign(table.data(), table.data() + table.size());

  view_.dtype = first.dtype;
  view_.block_size = static_cast<int32_t>(first.shape[a.slot]);
  view_.num_blocks = static_cast<int32_t>(first.shape[a.block]);
  view_.shape =
      KvShape{static_cast<int32_t>(keys_.size()), static_cast<int32_t>(first.shape[a.head]),
              static_cast<int32_t>(tokens), static_cast<int32_t>(first.shape[a.dim])};
  view_.strides =
      PagedStrides{first.strides[a.block], first.strides[a.slot], first.strides[a.head]};
  view_.key_pages = keys_.data();
  view_.value_pages = values_.data();
  view_.block_table = table_.data();
  if (tokens < 1 || tokens > INT32_MAX) ThrowInvalid("tokens: must be in [1, 2^31)");
  if (static_cast<int64_t>(table_.size()) < view_.TableBlocks())
    ThrowInvalid("block_table: " + std::to_string(table_.size()) + " entries, " +
                 std::to_string(tokens) + " tokens in blocks of " +
                 std::to_string(view_.block_size) + " need " + std::to_string(view_.TableBlocks()));
  ThrowIfError(view_.AsConst().Validate());
}

PagedKvView PagedKv::view() const { return view_.AsConst(); }

MutablePagedKvView PagedKv::mutable_view() const {
  if (!writable_) ThrowInvalid("out: this PagedKv was created with writable=False");
  ThrowIfError(view_.Validate());
  return view_;
}

void RegisterPaged(py::module_& m) {
  py::class_<PagedKv>(m, "PagedKv",
                      "One request's KV in an engine's per-layer paged caches, borrowed in place.")
      .def(py::init<py::handle, const std::string&, py::handle, int64_t, py::handle, bool>(),
           py::arg("layers"), py::arg("layout"), py::arg("block_table"), py::arg("tokens"),
           py::arg("dtype") = py::none(), py::arg("writable") = true)
      .def_property_readonly(
          "layout", [](const PagedKv& p) { return std::string(PagedLayoutName(p.layout())); })
      .def_property_readonly("shape",
                             [](const PagedKv& p) {
                               const KvShape& s = p.raw().shape;
                               return py::make_tuple(s.layers, s.kv_heads, s.tokens, s.head_dim);
                             })
      .def_property_readonly("dtype",
                             [](const PagedKv& p) { return std::string(DTypeName(p.raw().dtype)); })
      .def_property_readonly("block_size", [](const PagedKv& p) { return p.raw().block_size; })
      .def_property_readonly("num_blocks", [](const PagedKv& p) { return p.raw().num_blocks; })
      .def_property_readonly("tokens", [](const PagedKv& p) { return p.raw().shape.tokens; })
      .def(
          "gather",
          [](const PagedKv& p, py::handle out, py::handle dtype) {
            KvLayout layout = ImportKv(out, /*writable=*/true, DTypeFromPython(dtype), "out");
            if (!layout.whole)
              ThrowInvalid(
                  "out: gather needs one 5-D tensor (layers, 2, kv_heads, tokens, head_dim)");
            const PagedKvView pages = p.view();
            Status status;
            {
              py::gil_scoped_release release;
              status = CopyFromPages(pages, *layout.whole);
            }
            ThrowIfError(status);
          },
          py::arg("out"), py::arg("dtype") = py::none())
      .def(
          "scatter",
          [](const PagedKv& p, py::handle kv, py::handle dtype) {
            KvLayout layout = ImportKv(kv, /*writable=*/false, DTypeFromPython(dtype), "kv");
            if (!layout.whole)
              ThrowInvalid(
                  "kv: scatter needs one 5-D tensor (layers, 2, kv_heads, tokens, head_dim)");
            const MutablePagedKvView pages = p.mutable_view();
            Status status;
            {
              py::gil_scoped_release release;
              status = CopyToPages(layout.whole->AsConst(), pages);
            }
            ThrowIfError(status);
          },
          py::arg("kv"), py::arg("dtype") = py::none())
      .def("__repr__", [](const PagedKv& p) {
        const MutablePagedKvView& v = p.raw();
        return "<kvserve.PagedKv " + std::string(PagedLayoutName(p.layout())) + " " +
               std::to_string(v.shape.layers) + " layers, " + std::to_string(v.shape.tokens) +
               " tokens in blocks of " + std::to_string(v.block_size) + ", " +
               std::string(DTypeName(v.dtype)) + ">";
      });
}

}  // namespace kvserve::python
