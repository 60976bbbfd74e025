// Copyright kvserve authors. The frame size of every profile of a table for
// a request's shape, what the prefill worker's controller decides with
// (ControllerRequest::frame_bytes): PlanFrameSize's exact bytes for the pack
// codec; for an entropy codec the plan's fixed bytes plus its input (packed
// codes and raw region) times the codec's gain on it, learned from the
// frames actually sent (first from the table's CR at the tokens the table
// was measured at). Used by the C++ prefill worker and, through the Python
// bindings, by kvserve.pd's.
#ifndef KVSERVE_FRAME_SIZE_MODEL_H_
#define KVSERVE_FRAME_SIZE_MODEL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/controller.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"

namespace kvserve {

// Thread safety: thread-compatible (the prefill worker serialises requests).
class FrameSizeModel {
 public:
  // `shape` is the model's KV shape (its tokens are ignored); `head_scores`
  // (may be null) is what mixhq / duo encode with; `reference_tokens` the
  // prompt length the table's compression ratios were measured at.
  FrameSizeModel(const ProfileTable& table, const KvShape& shape, DType dtype,
                 const HeadScores* head_scores, int reference_tokens);

  // Frame bytes of each table profile (index 0, raw, and profiles without a
  // plan: 0, i.e. the table's ratio) for a prompt of `tokens` tokens.
  const std::vector<double>& For(int tokens);
  // Learns profile `index`'s codec gain from a frame of `frame_bytes` sent
  // for a prompt of `tokens` tokens.
  void Observe(int index, int tokens, uint64_t frame_bytes);
  // The current gain of profile `index` (1 for the pack codec; for tests).
  double gain(int index) const { return rows_[index].gain; }

 private:
  struct Row {
    std::optional<Profile> profile;  // empty: no plan (the table's ratio is used)
    bool exact = false;
    double gain = 1.0;  // frame = fixed + gain * (codes + raw)
    int64_t samples = 0;
  };
  std::optional<FrameSizePlan> Plan(const Row& row, int tokens) const;

  KvShape shape_;
  DType dtype_;
  const HeadScores* head_scores_;
  std::vector<Row> rows_;
  std::vector<double> bytes_;
};

}  // namespace kvserve

#endif  // KVSERVE_FRAME_SIZE_MODEL_H_
