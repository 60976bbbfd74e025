// Copyright kvserve authors. BuildPlan: the CPU reference's chunk plan and
// quantizer run plans (src/pipeline/frame_format.cc, src/quantizers/*),
// flattened into descriptor tables for the kernels.
#include "cuda/plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "pipeline/frame_format.h"
#include "pipeline/stages.h"
#include "quantizers/quantizers.h"
#include "transforms/hadamard.h"

namespace kvserve::cuda {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The first slot start >= `at` whose end (start + len) is 16-byte aligned, so
// that the rANS words, which the encoder writes backwards from the slot's
// end, are aligned u16 stores.
uint64_t SlotStart(uint64_t at, uint64_t len) { return AlignUp(at + len, 16) - len; }

// Plan::segment_order: each layer's segment indices by symbol count,
// largest first (ties in plan order), then all of them the same way.
std::vector<int32_t> LongestFirst(const std::vector<SegmentDesc>& segments,
                                  const std::vector<int64_t>& layer_segments) {
  const int64_t S = static_cast<int64_t>(segments.size());
  std::vector<int32_t> order(2 * S);
  auto sort_range = [&](int32_t* first, int64_t begin, int64_t end) {
    std::iota(first, first + (end - begin), static_cast<int32_t>(begin));
    std::stable_sort(first, first + (end - begin),
                     [&](int32_t a, int32_t b) { return segments[a].count > segments[b].count; });
  };
  for (size_t l = 0; l + 1 < layer_segments.size(); ++l)
    sort_range(order.data() + layer_segments[l], layer_segments[l], layer_segments[l + 1]);
  sort_range(order.data() + S, 0, S);
  return order;
}

struct RunSpec {
  int begin, end, levels;
};

// The runs of one head of a coded chunk, exactly as the CPU quantizer's
// PlanChunk (src/quantizers/*_quantizer.cc) lists them.
struct ModePlan {
  QuantAxis axis;
  int group;
};

ModePlan AxisFor(const Profile& p, int kind) {
  const int group = static_cast<int>(p.Get(ParamId::kGroup));
  const bool key = kind == 0;
  switch (p.quantizer()) {
    case QuantizerType::kUniform:
    case QuantizerType::kLayerMix:
      return {static_cast<QuantAxis>(p.Get(key ? ParamId::kAxisKey : ParamId::kAxisValue)), group};
    case QuantizerType::kKivi:
    case QuantizerType::kMixHQ:
      return key ? ModePlan{QuantAxis::kChannel, group} : ModePlan{QuantAxis::kToken, 0};
    default:
      return {QuantAxis::kToken, group};
  }
}

void HeadRuns(const Profile& p, const KvShape& shape, std::span<const uint8_t> state, int layer,
              int kind, int head, int token_begin, int tokens, std::vector<RunSpec>* out) {
  out->clear();
  auto get = [&](ParamId id) { return static_cast<int>(p.Get(id)); };
  const bool key = kind == 0;
  const int kind_levels = key ? quantizers::LevelsFor(get(ParamId::kBitsKey), get(ParamId::kLevelsKey))
                              : quantizers::LevelsFor(get(ParamId::kBitsValue), get(ParamId::kLevelsValue));
  auto append = [&](auto levels_of) {
    int begin = 0, levels = levels_of(0);
    for (int t = 1; t <= tokens; ++t) {
      const int l = t < tokens ? levels_of(t) : -1;
      if (l != levels) {
        out->push_back({begin, t, levels});
        begin = t;
        levels = l;
      }
    }
  };
  const int64_t recent_begin = int64_t{shape.tokens} - get(ParamId::kRecent);
  const int sinks = get(ParamId::kSinks);
  switch (p.quantizer()) {
    case QuantizerType::kUniform:
    case QuantizerType::kKivi:
      out->push_back({0, tokens, kind_levels});
      return;
    case QuantizerType::kLayerMix:
      out->push_back({0, tokens, 1 << quantizers::LayerMixBits(get(ParamId::kBitsFirst),
                                                               get(ParamId::kBitsLast), layer,
                                                               shape.layers)});
      return;
    case QuantizerType::kMixHQ:
      out->push_back({0, tokens, 1 << state[static_cast<size_t>(layer) * shape.kv_heads + head]});
      return;
    case QuantizerType::kTokenMix: {
      const int high = 1 << get(ParamId::kBitsHigh), low = 1 << get(ParamId::kBitsLow);
      append([&](int t) {
        const int64_t abs = int64_t{token_begin} + t;
        return (abs < sinks || abs >= recent_begin) ? high : low;
      });
      return;
    }
    case QuantizerType::kDuo: {
      const bool keep_all = state[static_cast<size_t>(layer) * shape.kv_heads + head] != 0;
      append([&](int t) {
        const int64_t abs = int64_t{token_begin} + t;
        return (keep_all || abs < sinks || abs >= recent_begin) ? kind_levels : 0;
      });
      return;
    }
    case QuantizerType::kRaw:
      return;
  }
}

}  // namespace

Result<PlanBasis> BuildPlanBasis(const Profile& profile, const KvShape& shape, DType dtype,
                                 std::span<const uint8_t> state, bool for_decode) {
  KVSERVE_RETURN_IF_ERROR(profile.Validate());
  if (profile.codec() != CodecType::kPack && profile.codec() != CodecType::kRans)
    return Status::NotSupported("the CUDA backend runs the pack and rans codecs only, not " +
                                std::string(CodecName(profile.codec())));
  const int D = shape.head_dim;
  if (D != 32 && D != 64 && D != 128 && D != 256)
    return Status::NotSupported("the CUDA backend needs head_dim 32, 64, 128 or 256, got " +
                                std::to_string(D));
  if (shape.layers <= 0 || shape.kv_heads <= 0 || shape.tokens <= 0 ||
      static_cast<uint32_t>(shape.layers) > pipeline::kMaxLayers ||
      static_cast<uint32_t>(shape.kv_heads) > pipeline::kMaxKvHeads ||
      static_cast<uint32_t>(shape.tokens) > pipeline::kMaxTokens)
    return Status::InvalidArgument("KV shape outside the frame format's limits");

  // The CPU quantizer validates the config against the shape and the state,
  // and defines coded_tokens.
  auto quantizer = pipeline::CreateQuantizerForDecode(profile, shape, state);
  if (!quantizer.ok()) return quantizer.status();

  PlanBasis plan;
  plan.profile = profile;
  plan.shape = shape;
  plan.dtype = dtype;
  plan.for_decode = for_decode;
  plan.state.assign(state.begin(), state.end());
  const int chunk = static_cast<int>(profile.Get(ParamId::kChunkTokens));
  const int coded = std::clamp((*quantizer)->CodedTokens(shape.tokens), 0, shape.tokens);
  plan.coded_tokens = coded;
  const int es = static_cast<int>(DTypeSize(dtype));
  const bool f32_scale = profile.Get(ParamId::kScaleDType) == static_cast<int64_t>(ScaleDType::kF32);
  const bool sym = profile.Get(ParamId::kSymmetric) != 0;

  FrameConsts& c = plan.consts;
  c.layers = shape.layers;
  c.kv_heads = shape.kv_heads;
  c.tokens = shape.tokens;
  c.head_dim = D;
  c.dtype = static_cast<int>(dtype);
  c.elem_bytes = es;
  c.transform = static_cast<int>(profile.transform());
  c.anchor = profile.transform() == TransformType::kDelta ? static_cast<int>(profile.Get(ParamId::kAnchor)) : 0;
  c.symmetric = sym ? 1 : 0;
  c.scale_f32 = f32_scale ? 1 : 0;
  c.codec = static_cast<int>(profile.codec());
  c.table_bits = static_cast<int>(profile.Get(ParamId::kTableBits));
  c.chunk_tokens = chunk;
  c.coded_tokens = coded;
  c.sign_words = (D + 63) / 64;
  c.hadamard_scale = transforms::HadamardScale(D);

  if (profile.transform() == TransformType::kHadamard) {
    const uint64_t seed = static_cast<uint64_t>(profile.Get(ParamId::kSeed));
    plan.sign_words.reserve(static_cast<size_t>(shape.layers) * 2 * shape.kv_heads * c.sign_words);
    for (int l = 0; l < shape.layers; ++l)
      for (int k = 0; k < 2; ++k)
        for (int h = 0; h < shape.kv_heads; ++h)
          for (int w = 0; w < c.sign_words; ++w)
            plan.sign_words.push_back(transforms::HadamardSignWord(
                seed, l, k == 0 ? KvKind::kKey : KvKind::kValue, h, w));
  }

  // Frame header, as the CPU encoder writes it.
  pipeline::FrameHeader header;
  header.dtype = dtype;
  header.shape = shape;
  header.chunk_tokens = static_cast<uint32_t>(chunk);
  header.coded_tokens = static_cast<uint32_t>(coded);
  plan.slots = pipeline::PlanChunks(shape, chunk, coded);
  header.record_count = static_cast<uint32_t>(plan.slots.size());
  header.profile_spec = profile.ToString();
  header.state = plan.state;
  pipeline::WriteFrameHeader(header, &plan.header);

  return plan;
}

Result<Plan> BuildPlan(const Profile& profile, const KvShape& shape, DType dtype,
                       std::span<const uint8_t> state, bool for_decode, RecordWindow window) {
  KVSERVE_ASSIGN_OR_RETURN(const PlanBasis basis, BuildPlanBasis(profile, shape, dtype, state, for_decode));
  return BuildPlan(basis, window);
}

Result<Plan> BuildPlan(const PlanBasis& basis, RecordWindow window) {
  const Profile& profile = basis.profile;
  const KvShape& shape = basis.shape;
  const std::span<const uint8_t> state = basis.state;
  const std::vector<pipeline::ChunkSlot>& slots = basis.slots;
  const bool for_decode = basis.for_decode;
  const int D = shape.head_dim;
  const int es = static_cast<int>(DTypeSize(basis.dtype));
  const bool f32_scale = profile.Get(ParamId::kScaleDType) == static_cast<int64_t>(ScaleDType::kF32);
  const bool sym = profile.Get(ParamId::kSymmetric) != 0;
  const uint32_t param_bytes_per_group = (sym ? 1u : 2u) * (f32_scale ? 4u : 2u);
  const bool rans = profile.codec() == CodecType::kRans;
  const bool affine = profile.transform() == TransformType::kAffine;

  Plan plan;
  plan.profile = profile;
  plan.shape = shape;
  plan.dtype = basis.dtype;
  plan.state = basis.state;
  plan.coded_tokens = basis.coded_tokens;
  plan.consts = basis.consts;
  FrameConsts& c = plan.consts;
  const int64_t all = static_cast<int64_t>(slots.size());
  if (window.end < 0) window.end = all;
  if (window.begin < 0 || window.begin >= window.end || window.end > all)
    return Status::InvalidArgument("record window [" + std::to_string(window.begin) + ", " +
                                   std::to_string(window.end) + ") outside the frame's " +
                                   std::to_string(all) + " records");
  const bool windowed = window.begin > 0 || window.end < all;
  c.record_base = window.begin;
  if (!windowed) {  // a window's caller holds the basis's (the same for every window)
    plan.header = basis.header;
    plan.sign_words = basis.sign_words;
  }

  std::vector<RunSpec> head_runs;
  uint64_t sym_ws = 0, slot_ws = 0, params_ws = 0, affine_ws = 0, hash_ws = 0, hist_ws = 0;
  // A window's bytes start with its first record (no frame header).
  uint64_t offset = windowed ? 0 : basis.header.size();
  uint64_t max_offset = offset;
  // Layer l's entries of the layer_* tables: the counts before its first
  // record (layers without records in a window get empty ranges).
  auto layer_starts_upto = [&plan](int layer) {
    while (static_cast<int>(plan.layer_records.size()) <= layer) {
      plan.layer_records.push_back(static_cast<int64_t>(plan.records.size()));
      plan.layer_segments.push_back(static_cast<int64_t>(plan.segments.size()));
      plan.layer_tiles.push_back(static_cast<int64_t>(plan.tiles.size()));
      plan.layer_raw_spans.push_back(static_cast<int64_t>(plan.raw_spans.size()));
      plan.layer_raw_records.push_back(static_cast<int64_t>(plan.raw_records.size()));
    }
  };
  for (int64_t frame_r = window.begin; frame_r < window.end; ++frame_r) {
    const pipeline::ChunkSlot& slot = slots[frame_r];
    const int64_t r = frame_r - window.begin;  // the plan's own record index
    layer_starts_upto(slot.layer);
    RecordDesc rec{};
    rec.type = static_cast<uint8_t>(slot.type);
    rec.kind = static_cast<uint8_t>(slot.kind);
    rec.layer = slot.layer;
    rec.token_begin = slot.token_begin;
    rec.tokens = slot.tokens;
    rec.first_segment = static_cast<int32_t>(plan.segments.size());
    uint64_t coded_static = 0, coded_max = 0;
    if (slot.type == pipeline::RecordType::kRaw) {
      rec.first_run = -1;
      rec.num_runs = 0;
      rec.num_segments = 1;
      rec.static_bytes = 20 + 10 + 4;
      SegmentDesc seg{};
      seg.record = static_cast<int32_t>(r);
      seg.run = -1;
      seg.levels = 256;
      seg.bits = 8;
      seg.count = static_cast<uint64_t>(shape.kv_heads) * slot.tokens * D * es;
      seg.packed_bytes = seg.count;
      seg.hdr_rel = 20;
      seg.index_in_record = 0;
      if (rans) {
        seg.sym_ws = sym_ws;
        sym_ws = AlignUp(sym_ws + seg.count, 16);
        seg.slot_ws = SlotStart(slot_ws, 1 + seg.packed_bytes);
        slot_ws = seg.slot_ws + 1 + seg.packed_bytes;
        seg.hist_ws = hist_ws;
        hist_ws += 4 * static_cast<uint64_t>(seg.levels);
      } else {
        rec.hash_ws = hash_ws;
        hash_ws += 64 * ((rec.static_bytes - 4 + seg.count - 1) / 1024);
      }
      coded_static += seg.packed_bytes;
      coded_max += seg.packed_bytes + (rans ? 1 : 0);
      plan.total_symbols += seg.count;
      plan.segments.push_back(seg);
      // Pack: windows over the record's bytes before the checksum; rans:
      // windows over its data bytes (copied to the workspace for the codec).
      const uint64_t window_bytes = rans ? seg.count : rec.static_bytes - 4 + seg.count;
      const int windows = static_cast<int>((window_bytes + kWindowBytes - 1) / kWindowBytes);
      for (int w = 0; w < windows; w += kSpanWindows)
        plan.raw_spans.push_back({static_cast<int32_t>(r), w, std::min(kSpanWindows, windows - w), 0});
      plan.raw_records.push_back(static_cast<int32_t>(r));
    } else {
      const ModePlan mp = AxisFor(profile, slot.kind);
      rec.first_run = static_cast<int32_t>(plan.runs.size());
      rec.side_bytes = affine ? static_cast<uint32_t>(8 * shape.kv_heads * D) : 0;
      uint32_t params_rel = 0;
      std::vector<SegmentDesc> segs;
      for (int h = 0; h < shape.kv_heads; ++h) {
        HeadRuns(profile, shape, state, slot.layer, slot.kind, h, slot.token_begin, slot.tokens,
                 &head_runs);
        for (const RunSpec& rs : head_runs) {
          RunDesc run{};
          run.record = static_cast<int32_t>(r);
          run.head = h;
          run.begin = rs.begin;
          run.tokens = rs.end - rs.begin;
          run.levels = rs.levels;
          run.bits = rs.levels > 0 ? pipeline::BitsForLevels(rs.levels) : 0;
          run.axis = static_cast<int32_t>(mp.axis);
          if (mp.axis == QuantAxis::kToken) {
            run.group = (mp.group == 0 || mp.group >= D) ? D : mp.group;
            run.ngroups = run.tokens * (D / run.group);
          } else {
            run.group = mp.group == 0 ? run.tokens : mp.group;
            run.ngroups = (run.tokens + run.group - 1) / run.group * D;
          }
          run.params_rel = params_rel;
          run.segment = -1;
          const int run_index = static_cast<int>(plan.runs.size());
          if (rs.levels > 0) {
            params_rel += static_cast<uint32_t>(run.ngroups) * param_bytes_per_group;
            SegmentDesc seg{};
            seg.record = static_cast<int32_t>(r);
            seg.run = run_index;
            seg.levels = rs.levels;
            seg.bits = run.bits;
            seg.count = static_cast<uint64_t>(run.tokens) * D;
            seg.packed_bytes = (seg.count * run.bits + 7) / 8;
            seg.index_in_record = static_cast<uint32_t>(segs.size());
            run.segment = rec.first_segment + static_cast<int32_t>(segs.size());
            if (rans) {
              seg.sym_ws = sym_ws;
              sym_ws = AlignUp(sym_ws + seg.count, 16);
              seg.slot_ws = SlotStart(slot_ws, 1 + seg.packed_bytes);
              slot_ws = seg.slot_ws + 1 + seg.packed_bytes;
              seg.hist_ws = hist_ws;
              hist_ws += 4 * static_cast<uint64_t>(seg.levels);
            }
            coded_static += seg.packed_bytes;
            coded_max += seg.packed_bytes + (rans ? 1 : 0);
            plan.total_symbols += seg.count;
            segs.push_back(seg);
          }
          // Tiles: one token group per tile on the channel axis, kTileRows
          // rows on the token axis (and for pruned runs).
          const int rows = (rs.levels > 0 && mp.axis == QuantAxis::kChannel) ? run.group : kTileRows;
          for (int t = 0; t < run.tokens; t += rows)
            plan.tiles.push_back({run_index, h, t, std::min(t + rows, run.tokens)});
          plan.runs.push_back(run);
        }
      }
      rec.num_runs = static_cast<int32_t>(plan.runs.size()) - rec.first_run;
      rec.num_segments = static_cast<uint16_t>(segs.size());
      rec.params_bytes = params_rel;
      const uint32_t body_static = 4 + rec.side_bytes + 4 + rec.params_bytes + 2;
      for (SegmentDesc& s : segs) s.hdr_rel = 20 + body_static + 10 * s.index_in_record;
      rec.static_bytes = 20 + body_static + 10 * rec.num_segments + 4;
      if (rans) {
        rec.params_ws = params_ws;
        params_ws = AlignUp(params_ws + rec.side_bytes + rec.params_bytes, 16);
      }
      if (affine) {
        rec.affine_ws = affine_ws;
        affine_ws += static_cast<uint64_t>(8) * shape.kv_heads * D;  // 2*H*D f32
      }
      plan.segments.insert(plan.segments.end(), segs.begin(), segs.end());
    }
    rec.static_offset = offset;
    // Static segment offsets (exact for pack).
    uint64_t prior = 0;
    for (int s = rec.first_segment; s < rec.first_segment + rec.num_segments; ++s) {
      SegmentDesc& seg = plan.segments[s];
      seg.static_coded_offset = offset + seg.hdr_rel + 10 + prior;
      prior += seg.packed_bytes;
    }
    rec.static_len = rec.static_bytes + coded_static;
    offset += rec.static_bytes + coded_static;
    max_offset += rec.static_bytes + coded_max;
    plan.records.push_back(rec);
  }
  layer_starts_upto(shape.layers);
  if (rans) plan.segment_order = LongestFirst(plan.segments, plan.layer_segments);
  plan.static_sizes = !rans;
  plan.direct = !rans;
  plan.pack_warps = !rans && D == 128 && profile.transform() == TransformType::kIdentity;
  for (const RunDesc& run : plan.runs) {
    if (run.levels == 0 || !plan.pack_warps) continue;
    if (run.axis != 0) {
      plan.pack_warps = run.bits % 2 == 0 && std::min(run.group, run.tokens) <= 32;
    } else {
      plan.pack_warps = run.group == 16 || run.group == 32 || run.group == 64 || run.group == 128;
    }
  }
  if (plan.pack_warps) {
    // The warp kernels run one code path per (axis, bits): tiles grouped by
    // it within each layer keep the blocks an SM holds at once on few paths
    // (the instruction cache). Every tile writes its own bytes, so the
    // order changes nothing else.
    for (int l = 0; l + 1 < static_cast<int>(plan.layer_tiles.size()); ++l) {
      std::stable_sort(plan.tiles.begin() + plan.layer_tiles[l], plan.tiles.begin() + plan.layer_tiles[l + 1],
                       [&plan](const TileDesc& x, const TileDesc& y) {
                         const RunDesc& a = plan.runs[x.run];
                         const RunDesc& b = plan.runs[y.run];
                         return a.axis != b.axis ? a.axis > b.axis : a.bits < b.bits;
                       });
    }
  }
  if (plan.pack_warps && !for_decode) {
    const uint64_t ssz = f32_scale ? 4 : 2;
    plan.pack_jobs.reserve(plan.tiles.size());
    for (const TileDesc& tile : plan.tiles) {
      const RunDesc& run = plan.runs[tile.run];
      const RecordDesc& rec = plan.records[run.record];
      PackJob j{};
      j.layer = rec.layer;
      j.kind = rec.kind;
      j.head = tile.head;
      j.token = rec.token_begin + run.begin + tile.row_begin;
      j.rows = tile.row_end - tile.row_begin;
      j.record = run.record;
      j.levels = run.levels;
      j.bits = static_cast<int16_t>(run.bits);
      j.group = static_cast<int16_t>(run.group);
      j.axis = run.axis;
      if (run.levels > 0) {
        // The record's params start after its 28-byte head and side bytes.
        const uint64_t groups_before = run.axis != 0 ? static_cast<uint64_t>(tile.row_begin / run.group) * D
                                                     : static_cast<uint64_t>(tile.row_begin) * (D / run.group);
        j.scales = rec.static_offset + 28 + rec.side_bytes + run.params_rel + groups_before * ssz;
        j.zeros = j.scales + static_cast<uint64_t>(run.ngroups) * ssz;
        j.codes = plan.segments[run.segment].static_coded_offset +
                  static_cast<uint64_t>(tile.row_begin) * D * static_cast<uint64_t>(run.bits) / 8;
      }
      plan.pack_jobs.push_back(j);
    }
    // By path, then layer (the jobs are in layer order already).
    auto path_key = [](const PackJob& j) { return (j.axis != 0 ? 0 : 16) + j.bits; };
    std::stable_sort(plan.pack_jobs.begin(), plan.pack_jobs.end(),
                     [&](const PackJob& x, const PackJob& y) { return path_key(x) < path_key(y); });
    // pack_job_starts: for each path, where each layer's jobs start (the
    // first job of the path at that layer or later), then the path's end.
    const std::vector<PackJob>& jobs = plan.pack_jobs;
    const int64_t n = static_cast<int64_t>(jobs.size());
    for (int64_t i = 0; i < n; ++plan.pack_paths) {
      const int key = path_key(jobs[i]);
      for (int l = 0; l <= shape.layers; ++l) {
        while (i < n && path_key(jobs[i]) == key && jobs[i].layer < l) ++i;
        plan.pack_job_starts.push_back(i);
      }
    }
  }
  plan.static_frame_bytes = offset;
  plan.max_frame_bytes = rans ? max_offset : offset;

  // Workspace.
  WorkspaceLayout& ws = plan.ws;
  const uint64_t S = plan.segments.size(), R = plan.records.size();
  uint64_t at = 0;
  ws.error = at;
  at += kWsAlign;
  ws.seg_len = at;
  at = AlignUp(at + 4 * S, kWsAlign);
  ws.seg_off = at;
  at = AlignUp(at + 8 * S, kWsAlign);
  ws.rec_off = at;
  at = AlignUp(at + 8 * R, kWsAlign);
  ws.rec_aux = at;
  at = AlignUp(at + (for_decode ? 16 * R : 0), kWsAlign);
  ws.symbols = at;
  at = AlignUp(at + (rans ? sym_ws : 0), kWsAlign);
  ws.slots = at;
  at = AlignUp(at + (rans && !for_decode ? slot_ws : 0), kWsAlign);
  ws.params = at;
  at = AlignUp(at + (rans && !for_decode ? params_ws : 0), kWsAlign);
  ws.affine = at;
  at = AlignUp(at + (affine && !for_decode ? affine_ws : 0), kWsAlign);
  ws.hash_sums = at;
  at = AlignUp(at + hash_ws, kWsAlign);  // encode and decode (pack raw records)
  ws.hist = at;
  ws.hist_bytes = rans && !for_decode ? hist_ws : 0;
  at = AlignUp(at + ws.hist_bytes, kWsAlign);
  ws.pages = at;  // a paged view's tables (the block table has at most one entry per token)
  at = AlignUp(at + 16 * static_cast<uint64_t>(plan.shape.layers) + 4 * static_cast<uint64_t>(plan.shape.tokens),
               kWsAlign);
  ws.total = at;
  return plan;
}

}  // namespace kvserve::cuda
