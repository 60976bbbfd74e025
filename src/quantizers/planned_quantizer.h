// Copyright kvserve authors. Base of every lossy quantizer: a chunk is
// described by a plan of token runs, and the base class turns the plan into
// segments and params (encode) or validates wire data against it (decode).
// Not a public header.
//
// Chunk layout (normative, docs/format.md §Quantised chunk):
//   * The plan lists, for head 0, 1, ... in order, the maximal runs of
//     consecutive chunk tokens that share one level count; pruned runs
//     (duo) have no level count.
//   * Each non-pruned run, in plan order, is one CodeSegment: levels = the
//     run's level count, symbols = its codes in [token][channel] order
//     (tokens * head_dim symbols). Pruned runs produce no segment.
//   * params = for each non-pruned run in plan order, that run's scales
//     then (asymmetric) its zeros, in the group order of RunShape
//     (grid_kernels.h), little-endian f16 or f32. Nothing else.
#ifndef KVSERVE_QUANTIZERS_PLANNED_QUANTIZER_H_
#define KVSERVE_QUANTIZERS_PLANNED_QUANTIZER_H_

#include <vector>

#include "core/stages.h"
#include "quantizers/grid_kernels.h"
#include "quantizers/quantizers.h"

namespace kvserve::quantizers {

// Tokens [begin, end) of one head, relative to the chunk.
struct TokenRun {
  int head = 0;
  int begin = 0;
  int end = 0;
  int levels = 0;  // 0 = pruned: no symbols, decoded as 0 with keep mask 0
};

struct ChunkPlan {
  QuantAxis axis = QuantAxis::kToken;
  int group = 0;  // RunShape::group for every run of the chunk
  std::vector<TokenRun> runs;
};

// Thread-safe: Quantize / Dequantize are const and keep no mutable state.
class PlannedQuantizer : public pipeline::Quantizer {
 public:
  // token_group > 0: CodedTokens rounds down to a multiple of it (keys or
  // values are grouped along tokens in blocks of token_group).
  PlannedQuantizer(const QuantConfig& config, const KvShape& shape, int token_group);

  // max(0, total - residual), rounded down to a multiple of token_group.
  int CodedTokens(int total_tokens) const override;
  // InvalidArgument if info/x disagree with each other or with the shape the
  // quantizer was created for, or if a value is not finite.
  Status Quantize(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
                  pipeline::QuantizedChunk* out) const override;
  // Corruption if `in` does not match the chunk's plan exactly.
  Status Dequantize(const pipeline::ChunkInfo& info, const pipeline::QuantizedChunk& in,
                    const pipeline::ChunkTensor& x, uint8_t* keep_mask) const override;
  // Streaming forms: each run is processed in tiles of whole quantisation
  // groups (at most kTileFloats values where the groups allow), so the rows
  // in flight stay in L1. Same bytes, values and errors as Quantize /
  // Dequantize; rows of one run arrive in token order, runs in plan order.
  Status QuantizeRows(const pipeline::ChunkInfo& info, pipeline::RowSource& rows,
                      pipeline::QuantizedChunk* out) const override;
  Status DequantizeRows(const pipeline::ChunkInfo& info, const pipeline::QuantizedChunk& in,
                        pipeline::RowSink& rows, uint8_t* keep_mask) const override;

  Status Layout(const pipeline::ChunkInfo& info, pipeline::ChunkLayout* layout) const override;

  // Target size of one streaming tile, in floats (16 KiB).
  static constexpr int kTileFloats = 4096;

 protected:
  // Fills plan->axis, plan->group and plan->runs for a chunk whose info has
  // been checked against shape().
  virtual void PlanChunk(const pipeline::ChunkInfo& info, ChunkPlan* plan) const = 0;

  // Appends the maximal runs of head `head` over `tokens` chunk tokens, where
  // levels_of(t) gives the level count (0 = pruned) of chunk token t.
  template <typename LevelsOf>
  static void AppendRuns(int head, int tokens, LevelsOf levels_of, ChunkPlan* plan) {
    int begin = 0;
    int levels = levels_of(0);
    for (int t = 1; t <= tokens; ++t) {
      const int l = t < tokens ? levels_of(t) : -1;
      if (l != levels) {
        plan->runs.push_back(TokenRun{head, begin, t, levels});
        begin = t;
        levels = l;
      }
    }
  }

  const QuantConfig& config() const { return config_; }
  const KvShape& shape() const { return shape_; }
  GridSpec SpecFor(int levels) const {
    return GridSpec{levels, config_.symmetric, config_.scale_dtype};
  }

 private:
  bool InfoMatches(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x) const;
  bool InfoMatches(const pipeline::ChunkInfo& info) const;
  // The layout `plan` implies for a chunk of `info`.
  void LayoutOf(const pipeline::ChunkInfo& info, const ChunkPlan& plan,
                pipeline::ChunkLayout* layout) const;
  // Checks `in` against `plan` (segment count, levels, symbol counts, params
  // size): Corruption naming the first mismatch.
  Status CheckLayout(const pipeline::ChunkInfo& info, const ChunkPlan& plan,
                     const pipeline::QuantizedChunk& in) const;
  // Tokens per streaming tile for runs of `tokens` tokens under `plan`: a
  // whole number of token groups (the whole run when groups span it).
  int TileTokens(const ChunkPlan& plan, int tokens, int dim) const;

  QuantConfig config_;
  KvShape shape_;
  int token_group_;
};

}  // namespace kvserve::quantizers

#endif  // KVSERVE_QUANTIZERS_PLANNED_QUANTIZER_H_
