// Copyright kvserve authors. What a hostile peer or file sends a frame
// decoder: a header that passes every check of docs/format.md §3 (magic,
// version, limits, checksum, a profile that parses, the plan's record count)
// while declaring a huge cache, and hand-made raw records for it. Shared by
// the memory-bound tests, the serve security tests and the fuzz corpus
// writer. Test-only.
#ifndef KVSERVE_TESTS_HOSTILE_FRAME_H_
#define KVSERVE_TESTS_HOSTILE_FRAME_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/checksum.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "pipeline/frame_format.h"

namespace kvserve::testing {

// The lossless profile with the smallest chunk: the most records per byte
// of header (the raw quantizer codes no token, so coded_tokens = 0).
inline constexpr const char* kHostileSpec = "identity+raw+pack+pipeline(chunk=16)";

// A valid header for `shape` under the raw profile `spec` (chunk from the
// spec): record_count is the plan's, so only missing records can reject it.
inline std::vector<uint8_t> HostileHeader(const KvShape& shape, DType dtype = DType::kF32,
                                          const std::string& spec = kHostileSpec) {
  pipeline::FrameHeader h;
  h.dtype = dtype;
  h.shape = shape;
  auto profile = Profile::Parse(spec);
  h.profile_spec = profile.ok() ? profile->ToString() : spec;
  h.chunk_tokens = profile.ok() ? static_cast<uint32_t>(profile->Get(ParamId::kChunkTokens)) : 16;
  h.coded_tokens = 0;
  h.record_count = static_cast<uint32_t>(
      pipeline::RecordsPerLayer(shape, static_cast<int>(h.chunk_tokens), 0) * shape.layers);
  std::vector<uint8_t> out;
  pipeline::WriteFrameHeader(h, &out);
  return out;
}

// A well-formed raw record (format.md §5, one levels-256 segment of the
// region's bytes, every byte `fill`) of the slot (layer, kind, token_begin,
// tokens) of a frame of `shape`.
inline std::vector<uint8_t> RawRecord(const KvShape& shape, DType dtype, int layer, int kind,
                                      int token_begin, int tokens, uint8_t fill = 0) {
  const uint32_t count = static_cast<uint32_t>(shape.kv_heads) * static_cast<uint32_t>(tokens) *
                         static_cast<uint32_t>(shape.head_dim) *
                         static_cast<uint32_t>(DTypeSize(dtype));
  std::vector<uint8_t> record(pipeline::kRecordHeaderBytes);
  pipeline::RecordHeader rh;
  rh.type = pipeline::RecordType::kRaw;
  rh.kind = static_cast<uint8_t>(kind);
  rh.layer = static_cast<uint32_t>(layer);
  rh.token_begin = static_cast<uint32_t>(token_begin);
  rh.tokens = static_cast<uint32_t>(tokens);
  rh.body_bytes = 10 + count;
  pipeline::WriteRecordHeader(rh, record.data());
  const uint16_t levels = 256;
  uint8_t segment[10];
  std::memcpy(segment, &levels, 2);
  std::memcpy(segment + 2, &count, 4);
  std::memcpy(segment + 6, &count, 4);
  record.insert(record.end(), segment, segment + 10);
  record.insert(record.end(), count, fill);
  const uint32_t crc = Checksum32(record.data(), record.size());
  uint8_t c[4];
  std::memcpy(c, &crc, 4);
  record.insert(record.end(), c, c + 4);
  return record;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_HOSTILE_FRAME_H_
