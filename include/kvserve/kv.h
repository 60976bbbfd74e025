// Copyright kvserve authors. KV cache tensors: dtypes, shapes, strided views.
//
// A KV cache is a 5-D tensor indexed [layer][kind][kv_head][token][dim] where
// kind 0 is K and kind 1 is V. Views carry explicit strides (in elements, not
// bytes) so that a paged, layer-major or head-major engine layout can be
// viewed without a copy. Views never own memory; KvCache does.
//
// Thread safety: views are plain values; concurrent reads are safe, writers
// must not overlap.
#ifndef KVSERVE_KV_H_
#define KVSERVE_KV_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "kvserve/status.h"

namespace kvserve {

// Stable numbers: stored in frames and KV files.
enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

// Bytes per element of `dtype` (4, 2, 2).
size_t DTypeSize(DType dtype);
// "f32", "f16", "bf16".
std::string_view DTypeName(DType dtype);
// Parses "f32"/"float32"/"F32", "f16"/"float16"/"F16", "bf16"/"bfloat16"/"BF16".
Result<DType> ParseDType(std::string_view name);

enum class KvKind : uint8_t { kKey = 0, kValue = 1 };

struct KvShape {
  int32_t layers = 0;
  int32_t kv_heads = 0;
  int32_t tokens = 0;
  int32_t head_dim = 0;

  // layers * 2 * kv_heads * tokens * head_dim.
  int64_t NumElements() const {
    return int64_t{layers} * 2 * kv_heads * tokens * head_dim;
  }
  bool operator==(const KvShape&) const = default;
};

// Element strides for [layer][kind][head][token][dim].
struct KvStrides {
  int64_t layer = 0;
  int64_t kind = 0;
  int64_t head = 0;
  int64_t token = 0;
  int64_t dim = 0;

  // Dense row-major strides of `shape` (dim fastest).
  static KvStrides Contiguous(const KvShape& shape);
  bool operator==(const KvStrides&) const = default;
};

// Read-only strided view. `data` points at element [0][0][0][0][0].
struct KvView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  KvShape shape;
  KvStrides strides;

  // Returns OK when shape is positive in every axis, data is non-null and
  // strides are non-negative. Does not (cannot) check the memory extent.
  Status Validate() const;
  // Byte address of element (layer, kind, head, token, dim). No bounds check.
  const std::byte* At(int layer, int kind, int head, int token, int dim) const {
    return static_cast<const std::byte*>(data) +
           (layer * strides.layer + kind * strides.kind + head * strides.head +
            token * strides.token + dim * strides.dim) *
               static_cast<int64_t>(DTypeSize(dtype));
  }
  // True when strides equal KvStrides::Contiguous(shape).
  bool IsContiguous() const { return strides == KvStrides::Contiguous(shape); }
  // Bytes of the logical tensor (NumElements * dtype size): the "V" of the
  // latency model, whatever the strides.
  int64_t LogicalBytes() const {
    return shape.NumElements() * static_cast<int64_t>(DTypeSize(dtype));
  }
};

// Writable strided view; same layout rules as KvView.
struct MutableKvView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  KvShape shape;
  KvStrides strides;

  Status Validate() const;
  std::byte* At(int layer, int kind, int head, int token, int dim) const {
    return static_cast<std::byte*>(data) +
           (layer * strides.layer + kind * strides.kind + head * strides.head +
            token * strides.token + dim * strides.dim) *
               static_cast<int64_t>(DTypeSize(dtype));
  }
  KvView AsConst() const { return KvView{data, dtype, shape, strides}; }
};

// An owning, contiguous KV cache. Movable, not copyable by accident.
class KvCache {
 public:
  KvCache() = default;
  // Allocates a zero-filled contiguous cache. The zeros come from calloc:
  // for large caches the OS commits pages as they are first written, so a
  // cache filled progressively (a decoder receiving records) costs resident
  // memory in proportion to what has been written. Throws std::bad_alloc
  // when the memory cannot be reserved.
  KvCache(DType dtype, const KvShape& shape);
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Deep copy of the elements of `view` (any strides) into a contiguous cache.
  static Result<KvCache> CopyFrom(const KvView& view);

  DType dtype() const { return dtype_; }
  const KvShape& shape() const { return shape_; }
  KvView view() const;
  MutableKvView mutable_view();
  std::byte* bytes() { return storage_.get(); }
  const std::byte* bytes() const { return storage_.get(); }
  size_t size_bytes() const { return size_; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  DType dtype_ = DType::kF32;
  KvShape shape_;
  std::unique_ptr<std::byte, Free> storage_;
  size_t size_ = 0;
};

// Called with a KV cache layer by layer, in layer order, as soon as layer
// `layer` is final: `layer_kv` holds that layer only (layers == 1) and is
// valid only during the call. A prefill's layer-ready hook
// (kvserve/runtime.h) and the connector's producers (kvserve/connector.h)
// have this shape.
using LayerReadyCallback = std::function<void(int layer, const KvView& layer_kv)>;

// Scalar conversions used by every backend. Round-to-nearest-even; NaN stays
// NaN (quiet); overflow to fp16 becomes +-inf. These are the normative
// conversions of docs/format.md.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

// Loads element bytes `src` of `dtype` as float / stores float `v` to `dst`.
float LoadAsFloat(const std::byte* src, DType dtype);
void StoreFromFloat(float v, std::byte* dst, DType dtype);

}  // namespace kvserve

#endif  // KVSERVE_KV_H_
