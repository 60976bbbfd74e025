// Copyright kvserve authors. Paged KV caches: one request's KV scattered over
// the fixed-size blocks of a serving engine's per-layer cache (vLLM,
// FlashInfer, SGLang), plus the request's block table.
//
// An engine keeps, per layer, a cache of `num_blocks` blocks of `block_size`
// token slots each. A request owns some of the blocks, listed in token order
// by its block table: its token t sits in block block_table[t / block_size],
// slot t % block_size. A PagedKvView says where one request's KV is: the
// base address of each layer's K and V pages, the element strides of the
// block, slot and head axes (head_dim is the contiguous axis), and the block
// table. EncoderContext gathers from such a view and DecoderContext scatters
// into one (kvserve/codec.h); a frame encoded from a paged view is
// byte-identical to the frame of the same KV laid out contiguously, so
// sender and receiver may use different layouts, block sizes and tables.
// docs/paged.md has the layouts, a worked example and the contract the GPU
// backend follows.
//
// The views are plain values of pointers and integers: they do not own the
// pages, the pointer arrays or the block table, which must outlive every
// call that uses the view. A view may describe host or device memory; the
// CPU codec reads and writes host memory only.
//
// Thread safety: views are plain values; concurrent reads are safe, writers
// must not overlap.
#ifndef KVSERVE_PAGED_H_
#define KVSERVE_PAGED_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvserve/kv.h"
#include "kvserve/status.h"

namespace kvserve {

// The per-layer cache tensors of the engines kvserve knows by name. Every
// tensor is one layer's cache, dense row-major in the dimensions shown.
// Stable numbers (the Python API and the CLI accept the names).
enum class PagedLayout : uint8_t {
  // "vllm": vLLM's FlashAttention backend,
  // [2, num_blocks, block_size, kv_heads, head_dim] (K pages, then V pages).
  kVllm = 0,
  // "vllm-block-first": vLLM's FlashInfer backend,
  // [num_blocks, 2, block_size, kv_heads, head_dim] (a block holds its K
  // then its V).
  kVllmBlockFirst = 1,
  // "flashinfer-nhd": FlashInfer's NHD paged cache,
  // [num_pages, 2, page_size, kv_heads, head_dim] (the same strides as
  // kVllmBlockFirst, which is what vLLM's FlashInfer backend hands it).
  kFlashInferNhd = 2,
  // "flashinfer-hnd": FlashInfer's HND paged cache,
  // [num_pages, 2, kv_heads, page_size, head_dim] (heads outside slots).
  kFlashInferHnd = 3,
};

// "vllm", "vllm-block-first", "flashinfer-nhd", "flashinfer-hnd".
std::string_view PagedLayoutName(PagedLayout layout);
// Parses the names above; InvalidArgument (listing them) otherwise.
Result<PagedLayout> ParsePagedLayout(std::string_view name);

// Element strides of one layer's pages (in elements of the cache dtype, not
// bytes); the head_dim axis has stride 1.
struct PagedStrides {
  int64_t block = 0;  // from block b to block b + 1
  int64_t slot = 0;   // from token slot s to s + 1 of a block
  int64_t head = 0;   // from KV head h to h + 1
  bool operator==(const PagedStrides&) const = default;
};

// Geometry of one layer's cache tensor in a named layout.
struct PagedLayerGeometry {
  PagedStrides strides;
  int64_t value_offset = 0;    // elements from the tensor's start to its V pages
  int64_t layer_elements = 0;  // elements of the whole tensor (2 * blocks * slots * heads * dim)
};

// The strides, V offset and size of a `layout` tensor of `num_blocks`
// blocks of `block_size` slots, `kv_heads` heads and `head_dim` dims. All
// sizes must be positive (InvalidArgument otherwise).
Result<PagedLayerGeometry> DescribePagedLayout(PagedLayout layout, int32_t num_blocks,
                                               int32_t block_size, int32_t kv_heads,
                                               int32_t head_dim);

// Read-only view of one request's KV in paged caches.
//
// Element (layer, kind, head, token, dim) is at
//   base(layer, kind) + (block_table[token / block_size] * strides.block
//                        + (token % block_size) * strides.slot
//                        + head * strides.head + dim) * DTypeSize(dtype)
// where base(layer, 0) = key_pages[layer] and base(layer, 1) =
// value_pages[layer]. shape.tokens is the request's token count; the table
// holds TableBlocks() = ceil(tokens / block_size) entries; the slots after
// the last token of the last block are not read.
struct PagedKvView {
  DType dtype = DType::kBF16;
  KvShape shape;           // layers, kv_heads, tokens (the request's), head_dim
  int32_t block_size = 0;  // token slots per block
  int32_t num_blocks = 0;  // blocks in each layer's cache: table entries are < this
  PagedStrides strides;
  const void* const* key_pages = nullptr;    // [shape.layers] K of block 0, slot 0, head 0
  const void* const* value_pages = nullptr;  // [shape.layers] V of block 0, slot 0, head 0
  const int32_t* block_table = nullptr;      // [TableBlocks()] block ids

  int32_t TableBlocks() const {
    return block_size > 0 ? (shape.tokens + block_size - 1) / block_size : 0;
  }
  // OK when the shape, block_size and num_blocks are positive, the strides
  // non-negative, every pointer (and every layer's two page pointers)
  // non-null, and every table entry in [0, num_blocks). InvalidArgument
  // naming the first violation otherwise. Does not (cannot) check the
  // memory extent.
  Status Validate() const;
  // Byte address of element (layer, kind, head, token, dim). No checks.
  const std::byte* At(int layer, int kind, int head, int token, int dim) const {
    const int64_t block = block_table[token / block_size];
    return static_cast<const std::byte*>(kind == 0 ? key_pages[layer] : value_pages[layer]) +
           (block * strides.block + (token % block_size) * strides.slot + head * strides.head +
            dim) *
               static_cast<int64_t>(DTypeSize(dtype));
  }
  // Bytes of the logical tensor: layers * 2 * kv_heads * tokens * head_dim
  // elements, whatever the paging.
  int64_t LogicalBytes() const {
    return shape.NumElements() * static_cast<int64_t>(DTypeSize(dtype));
  }
};

// Writable paged view; same layout rules as PagedKvView. A receiver's
// table must not name a block twice (Validate checks), so that no two
// tokens share a slot.
struct MutablePagedKvView {
  DType dtype = DType::kBF16;
  KvShape shape;
  int32_t block_size = 0;
  int32_t num_blocks = 0;
  PagedStrides strides;
  void* const* key_pages = nullptr;
  void* const* value_pages = nullptr;
  const int32_t* block_table = nullptr;

  int32_t TableBlocks() const {
    return block_size > 0 ? (shape.tokens + block_size - 1) / block_size : 0;
  }
  // As PagedKvView::Validate, and InvalidArgument when the table names a
  // block twice.
  Status Validate() const;
  std::byte* At(int layer, int kind, int head, int token, int dim) const {
    const int64_t block = block_table[token / block_size];
    return static_cast<std::byte*>(kind == 0 ? key_pages[layer] : value_pages[layer]) +
           (block * strides.block + (token % block_size) * strides.slot + head * strides.head +
            dim) *
               static_cast<int64_t>(DTypeSize(dtype));
  }
  PagedKvView AsConst() const {
    return PagedKvView{dtype,   shape,     block_size,  num_blocks,
                       strides, key_pages, value_pages, block_table};
  }
};

// An engine's per-layer caches in one named layout: holds the K and V page
// pointer arrays that views point into, and makes a request's view from its
// block table. Does not own the caches. Movable; views made from it are
// valid while it lives (and is not moved from).
class PagedKvLayers {
 public:
  PagedKvLayers() = default;
  // `layer_data[l]` is the start of layer l's cache tensor in `layout` (all
  // layers the same geometry). InvalidArgument for an empty span, a null
  // pointer or a non-positive size.
  static Result<PagedKvLayers> Create(PagedLayout layout, DType dtype,
                                      std::span<void* const> layer_data, int32_t num_blocks,
                                      int32_t block_size, int32_t kv_heads, int32_t head_dim);
  // Views of the request whose first `tokens` tokens sit in the blocks
  // `block_table` names (at least ceil(tokens / block_size) entries; the
  // rest are ignored). The table is not copied: it must outlive the view.
  // InvalidArgument when tokens < 1 or the table is too short; the view's
  // own Validate checks the entries.
  Result<PagedKvView> View(std::span<const int32_t> block_table, int32_t tokens) const;
  Result<MutablePagedKvView> MutableView(std::span<const int32_t> block_table,
                                         int32_t tokens) const;

  PagedLayout layout() const { return layout_; }
  DType dtype() const { return dtype_; }
  int32_t layers() const { return static_cast<int32_t>(keys_.size()); }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  const PagedLayerGeometry& geometry() const { return geometry_; }

 private:
  PagedLayout layout_ = PagedLayout::kVllm;
  DType dtype_ = DType::kBF16;
  int32_t num_blocks_ = 0, block_size_ = 0, kv_heads_ = 0, head_dim_ = 0;
  PagedLayerGeometry geometry_;
  std::vector<void*> keys_, values_;
};

// Copies the request's KV out of the pages into `out` (any strides).
// InvalidArgument when either view is invalid or they differ in shape or
// dtype.
Status CopyFromPages(const PagedKvView& pages, const MutableKvView& out);
// Copies `kv` (any strides) into the request's pages. Errors as
// CopyFromPages.
Status CopyToPages(const KvView& kv, const MutablePagedKvView& pages);

}  // namespace kvserve

#endif  // KVSERVE_PAGED_H_
