// Copyright kvserve authors. The frame plan the CUDA kernels execute: plain
// descriptor tables, built once on the host from (profile, shape, dtype,
// quantizer state) by BuildPlan and uploaded to the device. Everything a
// frame's layout depends on except codec output sizes is fixed here, so the
// kernels only compute values. Internal; shared by .cc and .cu files.
//
// Order: records in plan order (format.md §4, layer-major); each coded
// record's runs by head, then token; codec segments = the non-pruned runs of
// coded records and the single segment of each raw record, in record order.
// So the records, runs, segments and tiles of one layer are contiguous.
#ifndef KVSERVE_CUDA_PLAN_H_
#define KVSERVE_CUDA_PLAN_H_

#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/status.h"
#include "pipeline/frame_format.h"

namespace kvserve::cuda {

inline constexpr int kTileRows = 64;      // token-axis tile height (rows per block)
inline constexpr int kWindowBytes = 1024;  // raw-record window: one XXH3 block
inline constexpr int kSpanWindows = 32;    // windows per raw-record span (one thread block)
inline constexpr uint64_t kWsAlign = 256;

struct alignas(16) RecordDesc {
  uint8_t type;             // 1 coded, 2 raw
  uint8_t kind;             // 0 K, 1 V
  uint16_t num_segments;    // codec segments in the record
  int32_t layer;
  int32_t token_begin;      // absolute
  int32_t tokens;
  int32_t first_run;        // coded: first run index; raw: -1
  int32_t num_runs;
  int32_t first_segment;
  uint32_t side_bytes;      // affine: 8 * heads * head_dim, else 0
  uint32_t params_bytes;
  uint32_t static_bytes;    // record size with every coded_len = 0
  uint32_t pad0;
  uint64_t static_offset;   // frame offset when every size is static (pack)
  uint64_t static_len;      // record size when every size is static (pack), checksum included
  uint64_t hash_ws;         // raw records of pack frames: workspace offset of the block terms
  uint64_t params_ws;       // workspace offset of side + params (staged path)
  uint64_t affine_ws;       // workspace offset of f32 shift[H][D], scale[H][D]
};

struct alignas(16) RunDesc {
  int32_t record;
  int32_t head;
  int32_t begin;            // chunk-relative first token
  int32_t tokens;
  int32_t levels;           // 0 = pruned
  int32_t bits;             // BitsForLevels(levels)
  int32_t axis;             // QuantAxis: 0 token, 1 channel
  int32_t group;            // effective: token axis channels/group, channel axis tokens/group
  int32_t ngroups;
  uint32_t params_rel;      // offset of the run's scales within the record's params
  int32_t segment;          // codec segment, -1 when pruned
  int32_t pad0;
};

struct alignas(16) SegmentDesc {
  int32_t record;
  int32_t run;              // -1 for a raw record's segment
  int32_t levels;
  int32_t bits;
  uint64_t count;           // symbols
  uint64_t packed_bytes;    // ceil(count * bits / 8)
  uint64_t sym_ws;          // workspace offset of its u8 symbols (staged path)
  uint64_t slot_ws;         // workspace offset of its coded slot (rans), 1 + packed_bytes long
  uint32_t hdr_rel;         // segment header offset in its record if earlier coded_len were 0
  uint32_t index_in_record;
  uint64_t static_coded_offset;  // frame offset of its coded bytes when sizes are static
  uint64_t hist_ws;         // rans encode: workspace offset of its `levels` u32 symbol counts
};

// A block's share of a run of a coded record.
struct alignas(16) TileDesc {
  int32_t run;
  int32_t head;
  int32_t row_begin;        // run-relative
  int32_t row_end;
};

// One tile of a pack_warps plan as the encode warp kernel needs it, flat,
// so that a warp's first step is one load of its own row (not tile -> run ->
// record and segment): the frame offsets of the tile's first scale, zero
// point and code byte, and its first source row.
struct alignas(16) PackJob {
  uint64_t scales;
  uint64_t zeros;           // asymmetric grids; scales otherwise
  uint64_t codes;
  int32_t layer, kind, head, token;
  int32_t rows;
  int32_t record;           // errors name it
  int32_t levels;           // 0 = pruned
  int16_t bits;
  int16_t group;            // the run's group (tokens on the channel axis, channels on the token axis)
  int32_t axis;             // QuantAxis: 0 token, 1 channel
  int32_t pad0;
};
static_assert(sizeof(PackJob) == 64);

// A block's share of a raw record: windows [first_window, first_window +
// windows) of kWindowBytes each. Pack frames: windows of the record's bytes
// (header included); rans frames: windows of its data bytes.
struct RawSpan {
  int32_t record;
  int32_t first_window;
  int32_t windows;
  int32_t pad0;
};

// Per-frame constants, passed to kernels by value.
struct FrameConsts {
  int32_t layers, kv_heads, tokens, head_dim;
  int32_t dtype;            // DType
  int32_t elem_bytes;
  int32_t transform;        // TransformType
  int32_t anchor;           // delta: effective anchor interval (0 = chunk)
  int32_t symmetric;
  int32_t scale_f32;        // 0 f16, 1 f32
  int32_t codec;            // CodecType (pack or rans)
  int32_t table_bits;
  int32_t chunk_tokens;
  int32_t coded_tokens;
  int32_t sign_words;       // hadamard: u64 sign words per (layer, kind, head)
  float hadamard_scale;
  // The frame's plan index of the plan's first record: 0 for a whole
  // frame, RecordWindow::begin for a window (record tables are indexed
  // from it).
  int64_t record_base;
};

// Workspace layout (offsets from the workspace base).
struct WorkspaceLayout {
  uint64_t error = 0;       // 64 bytes: code, index, detail, flags; + running total
  uint64_t seg_len = 0;     // u32 per segment: coded_len (rans)
  uint64_t seg_off = 0;     // u64 per segment: encode: coded start in ws; decode: frame offset
  uint64_t rec_off = 0;     // u64 per record: frame offset
  uint64_t rec_aux = 0;     // decode: u64 per record x2: side / params frame offsets
  uint64_t symbols = 0;     // u8 symbols
  uint64_t slots = 0;       // rans coded slots (encode)
  uint64_t params = 0;      // side + params staging (encode, rans)
  uint64_t affine = 0;      // f32 affine side values (encode)
  uint64_t hash_sums = 0;   // pack: XXH3 block terms of raw records (8 u64 per 1 KiB block)
  uint64_t hist = 0;        // rans encode: per-segment symbol counts (zeroed by Begin)
  uint64_t hist_bytes = 0;
  uint64_t pages = 0;       // paged views: i64 page base per (layer, kind), then the i32 block table
  uint64_t total = 0;
};

struct Plan {
  FrameConsts consts{};
  Profile profile;
  KvShape shape;
  DType dtype = DType::kBF16;
  int coded_tokens = 0;
  std::vector<uint8_t> header;          // serialized frame header incl. checksum
  std::vector<uint8_t> state;           // quantizer state
  std::vector<RecordDesc> records;
  std::vector<RunDesc> runs;
  std::vector<SegmentDesc> segments;
  std::vector<TileDesc> tiles;          // coded tiles, incl. pruned runs
  // Encoder of a pack_warps plan: one PackJob per coded tile, ordered by
  // code path (channel axis first, then bits) and within a path by layer, so
  // a whole-frame launch runs one path after another (the instruction
  // cache); path c's jobs of layer l start at pack_job_starts[c * (layers +
  // 1) + l] and end where those of layer l + 1 start.
  std::vector<PackJob> pack_jobs;
  std::vector<int64_t> pack_job_starts;
  int pack_paths = 0;
  // rANS frames: the order the rANS kernels take segments in, longest first
  // (a segment is one warp's serial walk, so the long ones -- raw records'
  // single segments -- start with the first wave instead of last). Entries
  // [layer_segments[l], layer_segments[l + 1]) are layer l's segments (for
  // layer-at-a-time launches); entries [S, 2 S) are all S segments (for
  // whole-frame launches). Empty for pack frames.
  std::vector<int32_t> segment_order;
  std::vector<RawSpan> raw_spans;
  std::vector<int32_t> raw_records;     // indices of the raw records
  std::vector<uint64_t> sign_words;     // [layer][kind][head][word]
  // Per layer: [begin, end) indices into records/segments/tiles/raw_spans/raw_records.
  std::vector<int64_t> layer_records, layer_segments, layer_tiles, layer_raw_spans, layer_raw_records;
  bool static_sizes = false;            // pack codec: every offset known here
  bool direct = false;                  // pack: kernels write codes into the frame
  // Pack frames the warp kernel (pack_warps.cu) encodes: identity
  // transform, head_dim 128, every coded run's tiles either channel-axis
  // token groups of <= 32 rows with an even bit width, or token-axis with
  // groups of 16, 32, 64 or 128 channels.
  bool pack_warps = false;
  uint64_t static_frame_bytes = 0;      // valid when static_sizes
  uint64_t max_frame_bytes = 0;
  uint64_t total_symbols = 0;
  WorkspaceLayout ws;
};

// A contiguous range [begin, end) of a frame's records in plan order
// (format.md §4). end < 0 means to the frame's last record.
struct RecordWindow {
  int64_t begin = 0;
  int64_t end = -1;
};

// What every window of one frame's plan shares, built once per frame: the
// validated profile, shape and quantizer state, the chunk plan (format.md
// §4), the frame header, the Hadamard sign words and the frame constants.
struct PlanBasis {
  Profile profile;
  KvShape shape;
  DType dtype = DType::kBF16;
  std::vector<uint8_t> state;
  bool for_decode = false;
  FrameConsts consts{};
  int coded_tokens = 0;
  std::vector<pipeline::ChunkSlot> slots;  // every record of the frame, in plan order
  std::vector<uint8_t> header;             // serialized frame header incl. checksum
  std::vector<uint64_t> sign_words;        // [layer][kind][head][word] (hadamard)
};

// Validates (profile, shape, dtype, state) as BuildPlan does and builds the
// basis. NotSupported / InvalidArgument as BuildPlan.
Result<PlanBasis> BuildPlanBasis(const Profile& profile, const KvShape& shape, DType dtype,
                                 std::span<const uint8_t> state, bool for_decode);

// Builds the plan. `state` is the quantizer state (mixhq bits / duo flags),
// empty for other modes. For `for_decode` the workspace layout is the
// decoder's. NotSupported for codecs/shapes the GPU does not run.
//
// With a window narrower than the frame, the plan holds only the records of
// `window` (whole records, any range): its tables are indexed from the
// window's first record (consts.record_base), its workspace covers those
// records only, and its byte offsets (static_offset, static_frame_bytes,
// max_frame_bytes) count from the window's first record, with no frame
// header in front: encoding it writes exactly the bytes those records have
// in the whole frame, back to back. The header bytes are still built (the
// frame's, for the caller to send). InvalidArgument for a window outside
// the frame or empty.
Result<Plan> BuildPlan(const Profile& profile, const KvShape& shape, DType dtype,
                       std::span<const uint8_t> state, bool for_decode, RecordWindow window = {});
// The same from a basis (the windows of one frame share it). A window's plan
// leaves `header` and `sign_words` empty: they are the basis's.
Result<Plan> BuildPlan(const PlanBasis& basis, RecordWindow window);

}  // namespace kvserve::cuda

#endif  // KVSERVE_CUDA_PLAN_H_
