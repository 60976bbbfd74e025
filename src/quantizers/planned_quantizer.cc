// Copyright kvserve authors.
#include "quantizers/planned_quantizer.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace kvserve::quantizers {

using pipeline::ByteReader;
using pipeline::ByteWriter;
using pipeline::ChunkInfo;
using pipeline::ChunkTensor;
using pipeline::CodeSegment;
using pipeline::QuantizedChunk;

PlannedQuantizer::PlannedQuantizer(const QuantConfig& config, const KvShape& shape, int token_group)
    : config_(config), shape_(shape), token_group_(token_group) {}

int PlannedQuantizer::CodedTokens(int total_tokens) const {
  int coded = std::max(0, total_tokens - config_.residual);
  if (token_group_ > 0) coded -= coded % token_group_;
  return coded;
}

bool PlannedQuantizer::InfoMatches(const ChunkInfo& info) const {
  return info.num_layers == shape_.layers && info.layer >= 0 && info.layer < shape_.layers &&
         info.kv_heads == shape_.kv_heads && info.head_dim == shape_.head_dim &&
         (info.kind == KvKind::kKey || info.kind == KvKind::kValue) && info.tokens >= 1 &&
         info.token_begin >= 0 && info.total_tokens >= info.tokens &&
         info.token_begin <= info.total_tokens - info.tokens;
}

bool PlannedQuantizer::InfoMatches(const ChunkInfo& info, const ChunkTensor& x) const {
  return InfoMatches(info) && x.data != nullptr && x.heads == info.kv_heads &&
         x.tokens == info.tokens && x.dim == info.head_dim;
}

namespace {

// Index (RunShape group order) of the first group of the tile starting at
// token t0 of run `rs`, where t0 is a multiple of the tile size and so, on
// the channel axis, of the token group (or 0).
size_t FirstGroupOfTile(const ChunkPlan& plan, const RunShape& rs, int t0) {
  if (t0 == 0) return 0;
  if (plan.axis == QuantAxis::kToken) return static_cast<size_t>(t0) * (rs.NumGroups() / rs.tokens);
  return static_cast<size_t>(t0 / plan.group) * rs.dim;
}

}  // namespace

int PlannedQuantizer::TileTokens(const ChunkPlan& plan, int tokens, int dim) const {
  const int want = std::max(1, kTileFloats / std::max(1, dim));
  if (plan.axis == QuantAxis::kToken) return std::min(tokens, want);
  // Channel axis: groups of plan.group tokens (0 = the whole run) must not
  // be split across tiles.
  if (plan.group == 0 || plan.group >= tokens) return tokens;
  return std::min(tokens, plan.group * std::max(1, want / plan.group));
}

Status PlannedQuantizer::Quantize(const ChunkInfo& info, const ChunkTensor& x,
                                  QuantizedChunk* out) const {
  if (!InfoMatches(info, x)) {
    return Status::InvalidArgument("chunk does not match the quantizer's cache shape");
  }
  ChunkPlan plan;
  PlanChunk(info, &plan);
  // Segment buffers are reused from the previous chunk (same size in the
  // steady state), so the hot path neither allocates nor zero-fills.
  out->params.clear();
  ByteWriter params(&out->params);
  thread_local std::vector<GridParams> grid;
  size_t used = 0;
  for (const TokenRun& run : plan.runs) {
    if (run.levels == 0) continue;
    const RunShape rs{run.end - run.begin, info.head_dim, plan.axis, plan.group};
    const GridSpec spec = SpecFor(run.levels);
    grid.resize(rs.NumGroups());
    if (used == out->segments.size()) out->segments.emplace_back();
    CodeSegment& segment = out->segments[used++];
    segment.levels = static_cast<uint16_t>(run.levels);
    segment.symbols.resize(static_cast<size_t>(rs.tokens) * rs.dim);
    KVSERVE_RETURN_IF_ERROR(QuantizeRun(spec, rs, x.row(run.head, run.begin),
                                        static_cast<size_t>(x.dim), segment.symbols.data(),
                                        grid.data()));
    WriteGridParams(spec, grid.data(), grid.size(), params);
  }
  out->segments.resize(used);
  return Status::Ok();
}

void PlannedQuantizer::LayoutOf(const ChunkInfo& info, const ChunkPlan& plan,
                                pipeline::ChunkLayout* layout) const {
  layout->segments.clear();
  layout->param_bytes = 0;
  for (const TokenRun& run : plan.runs) {
    if (run.levels == 0) continue;
    const RunShape rs{run.end - run.begin, info.head_dim, plan.axis, plan.group};
    layout->segments.push_back(
        {static_cast<uint16_t>(run.levels), static_cast<size_t>(rs.tokens) * rs.dim});
    layout->param_bytes += rs.NumGroups() * ParamBytesPerGroup(SpecFor(run.levels));
  }
}

Status PlannedQuantizer::Layout(const ChunkInfo& info, pipeline::ChunkLayout* layout) const {
  if (!InfoMatches(info)) return Status::InvalidArgument("chunk does not match the quantizer's cache shape");
  ChunkPlan plan;
  PlanChunk(info, &plan);
  LayoutOf(info, plan, layout);
  return Status::Ok();
}

Status PlannedQuantizer::CheckLayout(const ChunkInfo& info, const ChunkPlan& plan,
                                     const QuantizedChunk& in) const {
  thread_local pipeline::ChunkLayout expected;
  LayoutOf(info, plan, &expected);
  if (in.segments.size() < expected.segments.size())
    return Status::Corruption("quantised chunk has too few segments");
  for (size_t i = 0; i < expected.segments.size(); ++i) {
    if (in.segments[i].levels != expected.segments[i].levels)
      return Status::Corruption("quantised segment level count does not match the profile");
    if (in.segments[i].symbols.size() != expected.segments[i].symbols)
      return Status::Corruption("quantised segment symbol count does not match the chunk");
  }
  if (in.segments.size() != expected.segments.size())
    return Status::Corruption("quantised chunk has too many segments");
  if (expected.param_bytes != in.params.size())
    return Status::Corruption("quantiser params size does not match the chunk");
  return Status::Ok();
}

Status PlannedQuantizer::Dequantize(const ChunkInfo& info, const QuantizedChunk& in,
                                    const ChunkTensor& x, uint8_t* keep_mask) const {
  if (!InfoMatches(info, x)) {
    return Status::Corruption("chunk does not match the quantizer's cache shape");
  }
  ChunkPlan plan;
  PlanChunk(info, &plan);
  // Check the whole layout before touching the output.
  KVSERVE_RETURN_IF_ERROR(CheckLayout(info, plan, in));
  ByteReader params(in.params);
  std::vector<GridParams> grid;
  size_t next_segment = 0;
  for (const TokenRun& run : plan.runs) {
    const int tokens = run.end - run.begin;
    float* rows = x.row(run.head, run.begin);
    if (keep_mask != nullptr) {
      std::memset(keep_mask + static_cast<size_t>(run.head) * info.tokens + run.begin,
                  run.levels == 0 ? 0 : 1, tokens);
    }
    if (run.levels == 0) {
      std::fill(rows, rows + static_cast<size_t>(tokens) * x.dim, 0.0f);
      continue;
    }
    const RunShape rs{tokens, info.head_dim, plan.axis, plan.group};
    const GridSpec spec = SpecFor(run.levels);
    grid.resize(rs.NumGroups());
    KVSERVE_RETURN_IF_ERROR(ReadGridParams(spec, grid.size(), params, grid.data()));
    KVSERVE_RETURN_IF_ERROR(DequantizeRun(spec, rs, in.segments[next_segment++].symbols.data(),
                                          grid.data(), rows, static_cast<size_t>(x.dim)));
  }
  return Status::Ok();
}

Status PlannedQuantizer::QuantizeRows(const ChunkInfo& info, pipeline::RowSource& rows,
                                      QuantizedChunk* out) const {
  if (!InfoMatches(info)) {
    return Status::InvalidArgument("chunk does not match the quantizer's cache shape");
  }
  ChunkPlan plan;
  PlanChunk(info, &plan);
  out->params.clear();
  ByteWriter params(&out->params);
  thread_local std::vector<GridParams> grid;
  thread_local std::vector<float> tile;
  const int dim = info.head_dim;
  size_t used = 0;
  for (const TokenRun& run : plan.runs) {
    if (run.levels == 0) continue;
    const int tokens = run.end - run.begin;
    const RunShape rs{tokens, dim, plan.axis, plan.group};
    const GridSpec spec = SpecFor(run.levels);
    grid.resize(rs.NumGroups());
    if (used == out->segments.size()) out->segments.emplace_back();
    CodeSegment& segment = out->segments[used++];
    segment.levels = static_cast<uint16_t>(run.levels);
    segment.symbols.resize(static_cast<size_t>(tokens) * dim);
    const int step = TileTokens(plan, tokens, dim);
    tile.resize(static_cast<size_t>(step) * dim);
    // Tiles hold whole groups, so a tile's groups are a contiguous slice of
    // the run's group order (RunShape) and its codes a contiguous slice of
    // the run's [token][channel] codes.
    for (int t0 = 0; t0 < tokens; t0 += step) {
      const int n = std::min(step, tokens - t0);
      rows.Read(run.head, run.begin + t0, n, tile.data());
      const RunShape ts{n, dim, plan.axis, plan.group};
      const size_t first_group = FirstGroupOfTile(plan, rs, t0);
      KVSERVE_RETURN_IF_ERROR(QuantizeRun(spec, ts, tile.data(), static_cast<size_t>(dim),
                                          segment.symbols.data() + static_cast<size_t>(t0) * dim,
                                          grid.data() + first_group));
    }
    WriteGridParams(spec, grid.data(), grid.size(), params);
  }
  out->segments.resize(used);
  return Status::Ok();
}

Status PlannedQuantizer::DequantizeRows(const ChunkInfo& info, const QuantizedChunk& in,
                                        pipeline::RowSink& rows, uint8_t* keep_mask) const {
  if (!InfoMatches(info)) {
    return Status::Corruption("chunk does not match the quantizer's cache shape");
  }
  ChunkPlan plan;
  PlanChunk(info, &plan);
  KVSERVE_RETURN_IF_ERROR(CheckLayout(info, plan, in));
  ByteReader params(in.params);
  thread_local std::vector<GridParams> grid;
  thread_local std::vector<float> tile;
  const int dim = info.head_dim;
  size_t next_segment = 0;
  for (const TokenRun& run : plan.runs) {
    const int tokens = run.end - run.begin;
    if (keep_mask != nullptr) {
      std::memset(keep_mask + static_cast<size_t>(run.head) * info.tokens + run.begin,
                  run.levels == 0 ? 0 : 1, tokens);
    }
    if (run.levels == 0) {
      rows.WriteZeros(run.head, run.begin, tokens);
      continue;
    }
    const RunShape rs{tokens, dim, plan.axis, plan.group};
    const GridSpec spec = SpecFor(run.levels);
    grid.resize(rs.NumGroups());
    KVSERVE_RETURN_IF_ERROR(ReadGridParams(spec, grid.size(), params, grid.data()));
    const uint8_t* codes = in.segments[next_segment++].symbols.data();
    const int step = TileTokens(plan, tokens, dim);
    tile.resize(static_cast<size_t>(step) * dim);
    for (int t0 = 0; t0 < tokens; t0 += step) {
      const int n = std::min(step, tokens - t0);
      const RunShape ts{n, dim, plan.axis, plan.group};
      const size_t first_group = FirstGroupOfTile(plan, rs, t0);
      KVSERVE_RETURN_IF_ERROR(DequantizeRun(spec, ts, codes + static_cast<size_t>(t0) * dim,
                                            grid.data() + first_group, tile.data(),
                                            static_cast<size_t>(dim)));
      rows.Write(run.head, run.begin + t0, n, tile.data());
    }
  }
  return Status::Ok();
}

}  // namespace kvserve::quantizers
