// Copyright kvserve authors. FrameSizeModel: each table profile's frame
// size for a prompt length, what Controller.choose(frame_bytes=...) decides
// with (kvserve/frame_size_model.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "errors.h"
#include "kvserve/frame_size_model.h"
#include "tensor.h"

namespace kvserve::python {
namespace py = pybind11;
namespace {

KvShape ShapeFrom(const py::sequence& shape) {
  if (shape.size() != 4) ThrowInvalid("shape: expected (layers, kv_heads, tokens, head_dim)");
  const KvShape s{shape[0].cast<int32_t>(), shape[1].cast<int32_t>(), shape[2].cast<int32_t>(),
                  shape[3].cast<int32_t>()};
  if (s.layers < 1 || s.kv_heads < 1 || s.head_dim < 1) ThrowInvalid("shape: layers, kv_heads, head_dim must be >= 1");
  return s;
}

int PositiveOrThrow(int value, const char* what) {
  if (value < 1) ThrowInvalid(std::string(what) + " must be >= 1");
  return value;
}

DType DTypeOrThrow(py::handle dtype) {
  std::optional<DType> d = DTypeFromPython(dtype);
  if (!d) ThrowInvalid("dtype: required ('f32', 'f16' or 'bf16')");
  return *d;
}

// Keeps the head scores the model points to alive with it.
class PyFrameSizeModel {
 public:
  PyFrameSizeModel(const ProfileTable& table, const py::sequence& shape, py::handle dtype,
                   std::shared_ptr<HeadScores> head_scores, int reference_tokens)
      : head_scores_(std::move(head_scores)), size_(table.size()),
        model_(table, ShapeFrom(shape), DTypeOrThrow(dtype), head_scores_.get(),
               PositiveOrThrow(reference_tokens, "reference_tokens")) {}

  std::vector<double> Sizes(int tokens) { return model_.For(PositiveOrThrow(tokens, "tokens")); }
  void Observe(int index, int tokens, uint64_t frame_bytes) {
    CheckIndex(index);
    model_.Observe(index, PositiveOrThrow(tokens, "tokens"), frame_bytes);
  }
  double Gain(int index) const {
    CheckIndex(index);
    return model_.gain(index);
  }

 private:
  void CheckIndex(int index) const {
    if (index < 0 || index >= size_) ThrowInvalid("index out of range");
  }
  std::shared_ptr<HeadScores> head_scores_;
  int size_;
  FrameSizeModel model_;
};

}  // namespace

void RegisterFrameSizes(py::module_& m) {
  py::class_<PyFrameSizeModel>(
      m, "FrameSizeModel",
      "Each table profile's frame bytes for a prompt length (kvserve/frame_size_model.h): exact for "
      "the pack codec, learned from observed frames for entropy codecs. Not thread-safe.")
      .def(py::init<const ProfileTable&, const py::sequence&, py::handle, std::shared_ptr<HeadScores>, int>(),
           py::arg("table"), py::arg("shape"), py::arg("dtype"), py::arg("head_scores") = nullptr,
           py::arg("reference_tokens") = 1024)
      .def("sizes", &PyFrameSizeModel::Sizes, py::arg("tokens"))
      .def("observe", &PyFrameSizeModel::Observe, py::arg("index"), py::arg("tokens"), py::arg("frame_bytes"))
      .def("gain", &PyFrameSizeModel::Gain, py::arg("index"));
}

}  // namespace kvserve::python
