// Copyright kvserve authors. Paged KV views (kvserve/paged.h): layouts,
// validation, and copies between pages and strided views.
#include "kvserve/paged.h"

#include <cstring>
#include <string>

namespace kvserve {
namespace {

constexpr PagedLayout kLayouts[] = {PagedLayout::kVllm, PagedLayout::kVllmBlockFirst,
                                    PagedLayout::kFlashInferNhd, PagedLayout::kFlashInferHnd};

// The checks both view kinds share; `pages(l, kind)` is the page pointer.
template <typename View>
Status ValidatePaged(const View& v) {
  const KvShape& s = v.shape;
  if (s.layers <= 0 || s.kv_heads <= 0 || s.tokens <= 0 || s.head_dim <= 0)
    return Status::InvalidArgument("paged KV view shape must be positive in every axis");
  if (v.block_size <= 0) return Status::InvalidArgument("paged KV view block_size must be >= 1");
  if (v.num_blocks <= 0) return Status::InvalidArgument("paged KV view num_blocks must be >= 1");
  if (v.strides.block < 0 || v.strides.slot < 0 || v.strides.head < 0)
    return Status::InvalidArgument("paged KV view strides must be non-negative");
  if (v.key_pages == nullptr || v.value_pages == nullptr || v.block_table == nullptr)
    return Status::InvalidArgument("paged KV view has a null page array or block table");
  for (int l = 0; l < s.layers; ++l)
    if (v.key_pages[l] == nullptr || v.value_pages[l] == nullptr)
      return Status::InvalidArgument("paged KV view: layer " + std::to_string(l) +
                                     " has a null page pointer");
  const int32_t blocks = v.TableBlocks();
  for (int32_t i = 0; i < blocks; ++i) {
    const int32_t b = v.block_table[i];
    if (b < 0 || b >= v.num_blocks)
      return Status::InvalidArgument("block table entry " + std::to_string(i) + " is " +
                                     std::to_string(b) + ", outside [0, " +
                                     std::to_string(v.num_blocks) + ")");
  }
  return Status::Ok();
}

// Copies one row of `dim` elements from a contiguous source row to a
// destination row whose elements are `dst_dim_stride` elements apart.
void CopyRow(std::byte* dst, const std::byte* src, int64_t dst_dim_stride, int dim, size_t es) {
  if (dst_dim_stride == 1) {
    std::memcpy(dst, src, es * dim);
    return;
  }
  for (int d = 0; d < dim; ++d) std::memcpy(dst + d * dst_dim_stride * es, src + d * es, es);
}

}  // namespace

std::string_view PagedLayoutName(PagedLayout layout) {
  switch (layout) {
    case PagedLayout::kVllm:
      return "vllm";
    case PagedLayout::kVllmBlockFirst:
      return "vllm-block-first";
    case PagedLayout::kFlashInferNhd:
      return "flashinfer-nhd";
    case PagedLayout::kFlashInferHnd:
      return "flashinfer-hnd";
  }
  return "?";
}

Result<PagedLayout> ParsePagedLayout(std::string_view name) {
  for (PagedLayout layout : kLayouts)
    if (PagedLayoutName(layout) == name) return layout;
  return Status::InvalidArgument("unknown paged layout '" + std::string(name) +
                                 "' (expected vllm, vllm-block-first, flashinfer-nhd or "
                                 "flashinfer-hnd)");
}

Result<PagedLayerGeometry> DescribePagedLayout(PagedLayout layout, int32_t num_blocks,
                                               int32_t block_size, int32_t kv_heads,
                                               int32_t head_dim) {
  if (num_blocks <= 0 || block_size <= 0 || kv_heads <= 0 || head_dim <= 0)
    return Status::InvalidArgument("paged layout sizes must be positive");
  const int64_t dim = head_dim;
  const int64_t block_elements = int64_t{block_size} * kv_heads * dim;  // one of K or V
  PagedLayerGeometry g;
  g.layer_elements = 2 * int64_t{num_blocks} * block_elements;
  switch (layout) {
    case PagedLayout::kVllm:  // [2, blocks, slots, heads, dim]
      g.strides = {block_elements, int64_t{kv_heads} * dim, dim};
      g.value_offset = int64_t{num_blocks} * block_elements;
      return g;
    case PagedLayout::kVllmBlockFirst:  // [blocks, 2, slots, heads, dim]
    case PagedLayout::kFlashInferNhd:
      g.strides = {2 * block_elements, int64_t{kv_heads} * dim, dim};
      g.value_offset = block_elements;
      return g;
    case PagedLayout::kFlashInferHnd:  // [blocks, 2, heads, slots, dim]
      g.strides = {2 * block_elements, dim, int64_t{block_size} * dim};
      g.value_offset = block_elements;
      return g;
  }
  return Status::InvalidArgument("unknown paged layout");
}

Status PagedKvView::Validate() const { return ValidatePaged(*this); }

Status MutablePagedKvView::Validate() const {
  KVSERVE_RETURN_IF_ERROR(ValidatePaged(*this));
  std::vector<bool> used(static_cast<size_t>(num_blocks), false);
  const int32_t blocks = TableBlocks();
  for (int32_t i = 0; i < blocks; ++i) {
    if (used[block_table[i]])
      return Status::InvalidArgument("block table names block " + std::to_string(block_table[i]) +
                                     " twice (entry " + std::to_string(i) + ")");
    used[block_table[i]] = true;
  }
  return Status::Ok();
}

Result<PagedKvLayers> PagedKvLayers::Create(PagedLayout layout, DType dtype,
                                            std::span<void* const> layer_data, int32_t num_blocks,
                                            int32_t block_size, int32_t kv_heads,
                                            int32_t head_dim) {
  if (layer_data.empty()) return Status::InvalidArgument("paged KV needs at least one layer");
  KVSERVE_ASSIGN_OR_RETURN(PagedLayerGeometry geometry,
                           DescribePagedLayout(layout, num_blocks, block_size, kv_heads, head_dim));
  PagedKvLayers p;
  p.layout_ = layout;
  p.dtype_ = dtype;
  p.num_blocks_ = num_blocks;
  p.block_size_ = block_size;
  p.kv_heads_ = kv_heads;
  p.head_dim_ = head_dim;
  p.geometry_ = geometry;
  const size_t es = DTypeSize(dtype);
  for (size_t l = 0; l < layer_data.size(); ++l) {
    if (layer_data[l] == nullptr)
      return Status::InvalidArgument("paged KV layer " + std::to_string(l) + " is null");
    p.keys_.push_back(layer_data[l]);
    p.values_.push_back(static_cast<std::byte*>(layer_data[l]) + geometry.value_offset * es);
  }
  return p;
}

Result<PagedKvView> PagedKvLayers::View(std::span<const int32_t> block_table,
                                        int32_t tokens) const {
  KVSERVE_ASSIGN_OR_RETURN(MutablePagedKvView v, MutableView(block_table, tokens));
  return v.AsConst();
}

Result<MutablePagedKvView> PagedKvLayers::MutableView(std::span<const int32_t> block_table,
                                                      int32_t tokens) const {
  if (keys_.empty()) return Status::InvalidArgument("paged KV layers are empty");
  if (tokens < 1) return Status::InvalidArgument("a request needs at least one token");
  const int64_t needed = (int64_t{tokens} + block_size_ - 1) / block_size_;
  if (static_cast<int64_t>(block_table.size()) < needed)
    return Status::InvalidArgument("block table has " + std::to_string(block_table.size()) +
                                   " entries, " + std::to_string(tokens) + " tokens need " +
                                   std::to_string(needed));
  MutablePagedKvView v;
  v.dtype = dtype_;
  v.shape = KvShape{layers(), kv_heads_, tokens, head_dim_};
  v.block_size = block_size_;
  v.num_blocks = num_blocks_;
  v.strides = geometry_.strides;
  v.key_pages = keys_.data();
  v.value_pages = values_.data();
  v.block_table = block_table.data();
  return v;
}

Status CopyFromPages(const PagedKvView& pages, const MutableKvView& out) {
  KVSERVE_RETURN_IF_ERROR(pages.Validate());
  KVSERVE_RETURN_IF_ERROR(out.Validate());
  if (!(pages.shape == out.shape) || pages.dtype != out.dtype)
    return Status::InvalidArgument("paged view and output view differ in shape or dtype");
  const size_t es = DTypeSize(out.dtype);
  const KvShape& s = out.shape;
  for (int l = 0; l < s.layers; ++l)
    for (int k = 0; k < 2; ++k)
      for (int h = 0; h < s.kv_heads; ++h)
        for (int t = 0; t < s.tokens; ++t)
          CopyRow(out.At(l, k, h, t, 0), pages.At(l, k, h, t, 0), out.strides.dim, s.head_dim, es);
  return Status::Ok();
}

Status CopyToPages(const KvView& kv, const MutablePagedKvView& pages) {
  KVSERVE_RETURN_IF_ERROR(kv.Validate());
  KVSERVE_RETURN_IF_ERROR(pages.Validate());
  if (!(pages.shape == kv.shape) || pages.dtype != kv.dtype)
    return Status::InvalidArgument("paged view and input view differ in shape or dtype");
  const size_t es = DTypeSize(kv.dtype);
  const KvShape& s = kv.shape;
  for (int l = 0; l < s.layers; ++l)
    for (int k = 0; k < 2; ++k)
      for (int h = 0; h < s.kv_heads; ++h)
        for (int t = 0; t < s.tokens; ++t) {
          std::byte* dst = pages.At(l, k, h, t, 0);
          if (kv.strides.dim == 1) {
            std::memcpy(dst, kv.At(l, k, h, t, 0), es * s.head_dim);
          } else {
            for (int d = 0; d < s.head_dim; ++d)
              std::memcpy(dst + d * es, kv.At(l, k, h, t, d), es);
          }
        }
  return Status::Ok();
}

}  // namespace kvserve
