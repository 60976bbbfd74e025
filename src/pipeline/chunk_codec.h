// Copyright kvserve authors. Encoding and decoding one chunk record
// (docs/format.md "Chunk records"). Internal; used by the frame contexts.
#ifndef KVSERVE_PIPELINE_CHUNK_CODEC_H_
#define KVSERVE_PIPELINE_CHUNK_CODEC_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "pipeline/frame_format.h"
#include "pipeline/gather.h"
#include "core/stages.h"

namespace kvserve::pipeline {

// The three stage objects of one profile, created once per frame. All their
// methods are const and safe to call from several threads at once.
struct Stages {
  std::unique_ptr<Transform> transform;
  std::unique_ptr<Quantizer> quantizer;
  std::unique_ptr<Codec> codec;
};

// Reusable per-thread buffers, so the hot path does not allocate per chunk.
struct ChunkScratch {
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  std::vector<uint8_t> side;
  QuantizedChunk quantized;
  std::vector<uint8_t> mask;
};

// The quantizer's view of `slot` of a cache of `shape` and `dtype`.
ChunkInfo MakeInfo(const KvShape& shape, DType dtype, const ChunkSlot& slot);

// Encodes `slot` of `kv` (strided or paged) into one complete record (header, body, checksum)
// appended to `out`, and adds its section sizes to `stats`.
Status EncodeChunk(const Stages& stages, const KvSource& kv, const ChunkSlot& slot,
                   ChunkScratch& scratch, std::vector<uint8_t>* out, FrameStats* stats);

// Decodes the record `record` (exactly one record incl. checksum, already
// matched to `slot`) into `out`. `keep_mask`, if non-null, points at the
// frame-level mask ([layer][kind][head][token]).
Status DecodeChunk(const Stages& stages, std::span<const uint8_t> record, const ChunkSlot& slot,
                   ChunkScratch& scratch, const KvTarget& out, uint8_t* keep_mask);

// Verifies the checksum of `record` and accumulates section sizes into
// `stats` without decoding values.
Status InspectChunk(std::span<const uint8_t> record, FrameStats* stats);

}  // namespace kvserve::pipeline

#endif  // KVSERVE_PIPELINE_CHUNK_CODEC_H_
