// Copyright kvserve authors. kvserve.PagedKv: one request's KV in an engine's
// per-layer paged caches (numpy arrays or CPU torch tensors, borrowed in
// place), as the library's paged views (kvserve/paged.h).
#ifndef KVSERVE_PYTHON_PAGED_H_
#define KVSERVE_PYTHON_PAGED_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "kvserve/paged.h"
#include "tensor.h"

namespace kvserve::python {

// Holds the borrowed layer tensors, the page pointers and a copy of the
// block table; the views point into it and live as long as it does.
class PagedKv {
 public:
  // `layers`: a sequence of per-layer cache tensors in `layout`'s shape, or
  // one tensor with a leading layer axis. All layers must share shape and
  // strides, and head_dim must be the contiguous axis. `block_table`: the
  // request's block ids (a 1-D integer array, tensor or sequence), at least
  // ceil(tokens / block_size) of them. Raises ValueError for anything else.
  PagedKv(pybind11::handle layers, const std::string& layout, pybind11::handle block_table,
          int64_t tokens, pybind11::handle dtype, bool writable);

  // ValueError when a table entry lies outside the caches (or, for the
  // mutable view, names a block twice), or the tensors were borrowed
  // read-only.
  PagedKvView view() const;
  MutablePagedKvView mutable_view() const;

  PagedLayout layout() const { return layout_; }
  const MutablePagedKvView& raw() const { return view_; }
  bool writable() const { return writable_; }

 private:
  std::vector<TensorRef> refs_;  // keep-alive
  std::vector<void*> keys_, values_;
  std::vector<int32_t> table_;
  PagedLayout layout_ = PagedLayout::kVllm;
  MutablePagedKvView view_;
  bool writable_ = true;
};

}  // namespace kvserve::python

#endif  // KVSERVE_PYTHON_PAGED_H_
