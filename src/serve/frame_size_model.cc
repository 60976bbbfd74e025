// Copyright kvserve authors.
#include "kvserve/frame_size_model.h"

#include <algorithm>

namespace kvserve {
namespace {

// Bounds of an entropy codec's gain on its input: it may grow it a little
// (framing) and shrinks it at most 50x.
constexpr double kMinGain = 0.02;
constexpr double kMaxGain = 1.05;
constexpr double kGainAlpha = 0.3;

}  // namespace

FrameSizeModel::FrameSizeModel(const ProfileTable& table, const KvShape& shape, DType dtype,
                               const HeadScores* head_scores, int reference_tokens)
    : shape_(shape), dtype_(dtype), head_scores_(head_scores), rows_(table.size()),
      bytes_(table.size(), 0.0) {
  for (int p = 1; p < table.size(); ++p) {
    auto profile = Profile::Parse(table.profile(p).spec);
    if (!profile.ok()) continue;
    Row& row = rows_[p];
    row.profile = std::move(*profile);
    auto plan = Plan(row, std::max(1, reference_tokens));
    if (!plan) {
      row.profile.reset();
      continue;
    }
    row.exact = plan->exact;
    if (row.exact) continue;
    // The gain that makes the plan at the reference length match the
    // table's ratio.
    const double input = static_cast<double>(plan->code_bytes + plan->raw_bytes);
    const double logical = static_cast<double>(shape_.layers) * 2 * shape_.kv_heads *
                           std::max(1, reference_tokens) * shape_.head_dim * DTypeSize(dtype_);
    const double frame = logical / table.profile(p).compression_ratio;
    if (input > 0)
      row.gain = std::clamp((frame - static_cast<double>(plan->fixed_bytes)) / input, kMinGain,
                            kMaxGain);
  }
}

std::optional<FrameSizePlan> FrameSizeModel::Plan(const Row& row, int tokens) const {
  KvShape s = shape_;
  s.tokens = tokens;
  auto plan = PlanFrameSize(*row.profile, s, dtype_, head_scores_);
  if (!plan.ok()) return std::nullopt;
  return *plan;
}

const std::vector<double>& FrameSizeModel::For(int tokens) {
  for (size_t p = 1; p < rows_.size(); ++p) {
    bytes_[p] = 0.0;
    if (!rows_[p].profile) continue;
    auto plan = Plan(rows_[p], tokens);
    if (!plan) continue;
    bytes_[p] = static_cast<double>(plan->fixed_bytes) +
                rows_[p].gain * static_cast<double>(plan->code_bytes + plan->raw_bytes);
  }
  return bytes_;
}

void FrameSizeModel::Observe(int index, int tokens, uint64_t frame_bytes) {
  if (index <= 0 || static_cast<size_t>(index) >= rows_.size()) return;
  Row& row = rows_[index];
  if (!row.profile || row.exact || frame_bytes == 0) return;
  auto plan = Plan(row, tokens);
  if (!plan) return;
  const double input = static_cast<double>(plan->code_bytes + plan->raw_bytes);
  if (!(input > 0)) return;
  const double seen = std::clamp(
      (static_cast<double>(frame_bytes) - static_cast<double>(plan->fixed_bytes)) / input,
      kMinGain, kMaxGain);
  row.gain = row.samples == 0 ? seen : (1 - kGainAlpha) * row.gain + kGainAlpha * seen;
  ++row.samples;
}

}  // namespace kvserve
