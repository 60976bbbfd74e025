// Copyright kvserve authors. PlanFrameSize: the bytes of a frame from its
// chunk plan and the quantizer's chunk layouts, without encoding anything
// (docs/format.md §3-§5 give every byte counted here).
#include <algorithm>

#include "kvserve/codec.h"
#include "pipeline/chunk_codec.h"
#include "pipeline/frame_format.h"
#include "pipeline/stages.h"

namespace kvserve {

Result<FrameSizePlan> PlanFrameSize(const Profile& profile, const KvShape& shape, DType dtype,
                                    const HeadScores* head_scores) {
  if (shape.layers <= 0 || shape.kv_heads <= 0 || shape.tokens <= 0 || shape.head_dim <= 0 ||
      static_cast<uint32_t>(shape.layers) > pipeline::kMaxLayers ||
      static_cast<uint32_t>(shape.kv_heads) > pipeline::kMaxKvHeads ||
      static_cast<uint32_t>(shape.tokens) > pipeline::kMaxTokens ||
      static_cast<uint32_t>(shape.head_dim) > pipeline::kMaxHeadDim)
    return Status::InvalidArgument("KV shape outside the frame format's limits");
  KVSERVE_ASSIGN_OR_RETURN(auto quantizer,
                           pipeline::CreateQuantizerForEncode(profile, shape, head_scores));
  const int chunk = static_cast<int>(profile.Get(ParamId::kChunkTokens));
  const int coded = std::clamp(quantizer->CodedTokens(shape.tokens), 0, shape.tokens);
  std::vector<uint8_t> state;
  pipeline::ByteWriter state_writer(&state);
  quantizer->SerializeState(state_writer);

  FrameSizePlan plan;
  plan.exact = profile.codec() == CodecType::kPack;
  plan.fixed_bytes = pipeline::kFrameFixedHeaderBytes + profile.ToString().size() + state.size() +
                     pipeline::kFrameChecksumBytes;
  // Transform side bytes per coded chunk: affine's shift and scale per
  // (head, channel); no other transform writes any.
  const uint64_t side = profile.transform() == TransformType::kAffine
                            ? uint64_t{8} * shape.kv_heads * shape.head_dim
                            : 0;
  constexpr uint64_t kSegmentHeader = 2 + 4 + 4;    // levels, count, coded_len
  constexpr uint64_t kCodedBodyHeader = 4 + 4 + 2;  // side_len, params_len, segment_count
  const int64_t records = pipeline::RecordsPerLayer(shape, chunk, coded) * shape.layers;
  pipeline::ChunkLayout layout;
  for (int64_t i = 0; i < records; ++i) {
    const pipeline::ChunkSlot slot = pipeline::SlotAt(shape, chunk, coded, i);
    plan.fixed_bytes += pipeline::kMinRecordBytes;
    if (slot.type == pipeline::RecordType::kRaw) {
      plan.fixed_bytes += kSegmentHeader;
      plan.raw_bytes += static_cast<uint64_t>(shape.kv_heads) * slot.tokens * shape.head_dim *
                        DTypeSize(dtype);
      continue;
    }
    KVSERVE_RETURN_IF_ERROR(
        quantizer->Layout(pipeline::MakeInfo(shape, dtype, slot), &layout));
    plan.fixed_bytes += kCodedBodyHeader + side + layout.param_bytes +
                        kSegmentHeader * layout.segments.size();
    for (const auto& segment : layout.segments)
      plan.code_bytes += (segment.symbols * pipeline::BitsForLevels(segment.levels) + 7) / 8;
  }
  return plan;
}

}  // namespace kvserve
