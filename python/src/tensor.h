// Copyright kvserve authors. Borrowing Python tensors as KV views, without
// copying them.
//
// A Python object is imported as a TensorRef: a pointer, a dtype, a shape and
// element strides, plus whatever keeps the memory alive. Sources, in order:
//   1. a DLPack capsule ("dltensor"): consumed as the DLPack protocol says
//      (renamed "used_dltensor", its deleter called when the ref dies);
//   2. an object with the buffer protocol (numpy arrays, memoryviews):
//      strides in bytes, converted to elements (read-only numpy arrays
//      work; numpy's own __dlpack__ refuses them);
//   3. an object with __dlpack__ / __dlpack_device__ (torch tensors).
// Host memory by default (a CUDA tensor is then NotSupported, naming the
// CUDA entry points). With Memory::kCuda only CUDA device memory is
// accepted, from
//   1. a DLPack capsule of device type kDLCUDA;
//   2. an object with __dlpack__ / __dlpack_device__ on a CUDA device
//      (torch): __dlpack__(stream=...) is called with the stream the
//      kvserve call runs on, so the producer orders its pending work before
//      it (DLPack's stream contract);
//   3. an object with __cuda_array_interface__ (CuPy, Numba; version 2 or
//      3): its "stream", if any, is kept in TensorRef::producer_stream for
//      the caller to wait on.
//
// KV inputs are then laid out as:
//   * one 5-D tensor (layers, 2, kv_heads, tokens, head_dim), any strides:
//     one KvView over it;
//   * a sequence of per-layer (K, V) pairs, each (kv_heads, tokens,
//     head_dim) or (1, kv_heads, tokens, head_dim) (HF layout, batch 1):
//     one KvView when every K and V lives in one allocation at a constant
//     layer and kind offset (a stacked tensor's slices), otherwise one view
//     per layer (layer stride 0, kind stride V - K). A layer whose V lies
//     below its K in memory, or whose K and V strides differ, cannot be
//     described by a KvView (strides are non-negative); only that layer is
//     staged through a contiguous scratch buffer of one layer.
//
// Every TensorRef must be destroyed with the GIL held.
#ifndef KVSERVE_PYTHON_TENSOR_H_
#define KVSERVE_PYTHON_TENSOR_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvserve/kv.h"

namespace kvserve::python {

// Where imported memory must live.
enum class Memory { kHost, kCuda };

struct TensorRef {
  void* data = nullptr;
  int device_id = 0;  // CUDA device ordinal (Memory::kCuda)
  // __cuda_array_interface__'s "stream": the producer's stream the data is
  // valid on (the consumer must wait on it); 0 when none was given.
  intptr_t producer_stream = 0;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // elements, non-negative
  // Keeps the memory alive; releases the buffer / consumes the capsule when
  // the last copy dies.
  std::shared_ptr<void> owner;

  int ndim() const { return static_cast<int>(shape.size()); }
  std::byte* bytes() const { return static_cast<std::byte*>(data); }
};

// Imports `object` (see above). `writable` requests writable memory (decode
// outputs). `dtype_override`: the element type of 2-byte integer buffers
// (numpy has no bfloat16, so bf16 caches arrive as uint16) and a check for
// everything else. `what` names the argument in error messages.
// `memory` and `stream` (the cudaStream_t the caller will use, as an
// integer; 0 = legacy default) select and order CUDA imports, see above.
TensorRef ImportTensor(pybind11::handle object, bool writable,
                       std::optional<DType> dtype_override, const std::string& what,
                       Memory memory = Memory::kHost, intptr_t stream = 0);

// A C-contiguous byte range of any element type (a frame buffer, a keep
// mask), in host or device memory.
struct BytesRef {
  uint8_t* data = nullptr;
  uint64_t bytes = 0;
  int device_type = 1;  // DLPack: 1 = CPU, 2 = CUDA, 3 = CUDA pinned host
  int device_id = 0;
  intptr_t producer_stream = 0;  // as TensorRef's
  std::shared_ptr<void> owner;
  bool on_device() const { return device_type == 2; }
};

// Imports `object` as bytes: a buffer-protocol object (host memory), a
// DLPack capsule or an object with __dlpack__ (CPU, CUDA or CUDA pinned
// host; __dlpack__ gets `stream` as ImportTensor's), or an object with
// __cuda_array_interface__ (CUDA). Refuses memory that is not C-contiguous,
// and read-only memory when `writable`.
BytesRef ImportBytes(pybind11::handle object, bool writable, const std::string& what,
                     intptr_t stream = 0);

// One KV cache given from Python, as views the library can read or write.
struct KvLayout {
  std::vector<TensorRef> refs;  // keep-alive for every borrowed tensor
  DType dtype = DType::kF32;
  KvShape shape;
  // Set when the whole cache is one strided view.
  std::optional<MutableKvView> whole;
  // Otherwise, per layer: a view of the full shape whose layer stride is 0
  // (so view.At(l, ...) addresses layer l's memory), or nullopt when the
  // layer must be staged; and the indices into `refs` of its K and V.
  std::vector<std::optional<MutableKvView>> layer_views;
  std::vector<std::pair<int, int>> layer_pairs;

  bool AnyStaged() const;
};

// Builds the layout of `kv`: a 5-D tensor or a sequence of (K, V) pairs.
// With Memory::kCuda every tensor must be on one CUDA device, and a layer
// whose V lies below its K gets a negative kind stride (the CUDA views
// allow it) instead of being staged.
KvLayout ImportKv(pybind11::handle kv, bool writable, std::optional<DType> dtype_override,
                  const std::string& what, Memory memory = Memory::kHost, intptr_t stream = 0);

// Copies one staged layer between a (K, V) pair with arbitrary strides and a
// contiguous [2][kv_heads][tokens][head_dim] buffer.
void GatherLayer(const TensorRef& k, const TensorRef& v, const KvShape& shape, size_t elem,
                 std::byte* contiguous);
void ScatterLayer(const std::byte* contiguous, const KvShape& shape, size_t elem,
                  const TensorRef& k, const TensorRef& v);

// Parses "f32"/"float32"/"bf16"/... or a numpy/torch dtype object (by its
// name); nullopt for None.
std::optional<DType> DTypeFromPython(pybind11::handle dtype);

}  // namespace kvserve::python

#endif  // KVSERVE_PYTHON_TENSOR_H_
