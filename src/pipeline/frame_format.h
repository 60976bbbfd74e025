// Copyright kvserve authors. The byte layout of frames (docs/format.md):
// constants, header and record-header (de)serialisation, and the chunk plan
// that both encoder and decoder derive from (shape, profile). Internal.
#ifndef KVSERVE_PIPELINE_FRAME_FORMAT_H_
#define KVSERVE_PIPELINE_FRAME_FORMAT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/status.h"

namespace kvserve::pipeline {

inline constexpr uint8_t kFrameMagic[4] = {'K', 'V', 'S', 'F'};
inline constexpr uint16_t kFrameVersion = 1;
// Fixed part of the frame header, before the profile string and state.
inline constexpr size_t kFrameFixedHeaderBytes = 42;
inline constexpr size_t kFrameChecksumBytes = 8;
inline constexpr size_t kRecordHeaderBytes = 20;
inline constexpr size_t kRecordChecksumBytes = 4;

// Decoder limits (docs/format.md "Limits"). A header outside them is
// rejected before anything is allocated.
inline constexpr uint32_t kMaxLayers = 1024;
inline constexpr uint32_t kMaxKvHeads = 1024;
inline constexpr uint32_t kMaxTokens = 1u << 24;
inline constexpr uint32_t kMaxHeadDim = 1024;
inline constexpr uint32_t kMaxProfileBytes = 4096;
inline constexpr uint32_t kMaxStateBytes = 1u << 20;
inline constexpr uint32_t kMaxSegments = 1u << 16;

enum class RecordType : uint8_t { kCoded = 1, kRaw = 2 };

struct FrameHeader {
  DType dtype = DType::kF32;
  KvShape shape;
  uint32_t chunk_tokens = 0;
  uint32_t coded_tokens = 0;
  uint32_t record_count = 0;
  std::string profile_spec;
  std::vector<uint8_t> state;
};

struct RecordHeader {
  RecordType type = RecordType::kCoded;
  uint8_t kind = 0;
  uint32_t layer = 0;
  uint32_t token_begin = 0;
  uint32_t tokens = 0;
  uint32_t body_bytes = 0;
};

// One planned record: what the encoder writes and the decoder expects.
struct ChunkSlot {
  RecordType type;
  int layer;
  int kind;
  int token_begin;
  int tokens;
};

// The records of a frame, in encoding order: for each layer, K coded blocks,
// K raw blocks, V coded blocks, V raw blocks. Blocks are `chunk_tokens`
// long except the last of each region.
std::vector<ChunkSlot> PlanChunks(const KvShape& shape, int chunk_tokens, int coded_tokens);
// Index of the slot (layer, kind, type, token_begin) in PlanChunks' order,
// or -1 when no planned slot starts there.
int64_t SlotIndex(const KvShape& shape, int chunk_tokens, int coded_tokens, int layer, int kind,
                  RecordType type, int token_begin);
// Number of records per layer, given the plan parameters.
int64_t RecordsPerLayer(const KvShape& shape, int chunk_tokens, int coded_tokens);
// Slot `index` (0 <= index < RecordsPerLayer * layers) of PlanChunks'
// order, computed without materialising the plan: a decoder's memory must
// not grow with the record count a header declares (docs/format.md §7).
ChunkSlot SlotAt(const KvShape& shape, int chunk_tokens, int coded_tokens, int64_t index);
// The fewest bytes a record can occupy (header and checksum, empty body):
// a frame of n bytes after its header holds at most n / this many records.
inline constexpr size_t kMinRecordBytes = kRecordHeaderBytes + kRecordChecksumBytes;

// Appends the serialized header (with checksum) to `out`.
void WriteFrameHeader(const FrameHeader& header, std::vector<uint8_t>* out);
// Parses and verifies a header from the front of `bytes`; returns bytes used.
// Corruption on bad magic, version, checksum, or any field outside limits.
Result<size_t> ReadFrameHeader(std::span<const uint8_t> bytes, FrameHeader* header);

// The size of the frame header (fixed part, profile, state, checksum) at the
// front of `prefix`, from its magic and length fields alone; 0 when `prefix`
// is too short to tell. Corruption on bad magic or lengths outside limits.
// What a stream splitter needs; ReadFrameHeader verifies the rest.
Result<size_t> FrameHeaderSize(std::span<const uint8_t> prefix);
// The size of the record (header, body, checksum) at the front of `prefix`;
// 0 when `prefix` is shorter than a record header.
uint64_t RecordSize(std::span<const uint8_t> prefix);

void WriteRecordHeader(const RecordHeader& header, uint8_t out[kRecordHeaderBytes]);
// Parses a record header; checks only the field ranges it can check alone.
Status ReadRecordHeader(std::span<const uint8_t> bytes, RecordHeader* header);

}  // namespace kvserve::pipeline

#endif  // KVSERVE_PIPELINE_FRAME_FORMAT_H_
