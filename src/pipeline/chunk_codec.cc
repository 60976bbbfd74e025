#include "pipeline/chunk_codec.h"

#include <cstring>
#include <string>

#include "core/checksum.h"
#include "pipeline/gather.h"

namespace kvserve::pipeline {

ChunkInfo MakeInfo(const KvShape& shape, DType dtype, const ChunkSlot& slot) {
  ChunkInfo info;
  info.layer = slot.layer;
  info.num_layers = shape.layers;
  info.kind = slot.kind == 0 ? KvKind::kKey : KvKind::kValue;
  info.kv_heads = shape.kv_heads;
  info.head_dim = shape.head_dim;
  info.token_begin = slot.token_begin;
  info.tokens = slot.tokens;
  info.total_tokens = shape.tokens;
  info.source_dtype = dtype;
  return info;
}

namespace {

size_t ChunkElements(const KvShape& shape, int tokens) {
  return static_cast<size_t>(shape.kv_heads) * tokens * shape.head_dim;
}

// Appends `segment` as (levels u16, count u32, coded_len u32, coded bytes).
Status AppendSegment(const Codec& codec, const CodeSegment& segment, std::vector<uint8_t>* out,
                     uint64_t* payload_bytes) {
  ByteWriter w(out);
  w.PutU16(segment.levels);
  w.PutU32(static_cast<uint32_t>(segment.symbols.size()));
  const size_t len_at = out->size();
  w.PutU32(0);
  const size_t start = out->size();
  KVSERVE_RETURN_IF_ERROR(codec.Encode(segment, out));
  const size_t coded = out->size() - start;
  if (coded > UINT32_MAX) return Status::ResourceExhausted("segment larger than 4 GiB");
  const uint32_t coded32 = static_cast<uint32_t>(coded);
  std::memcpy(out->data() + len_at, &coded32, 4);
  *payload_bytes += coded;
  return Status::Ok();
}

// Reads one segment and decodes it into `segment`. `max_count` bounds the
// symbol count (and so the allocation) by what the chunk can hold.
Status ReadSegment(const Codec& codec, ByteReader& r, size_t max_count, CodeSegment* segment) {
  uint16_t levels;
  uint32_t count, coded_len;
  KVSERVE_RETURN_IF_ERROR(r.GetU16(&levels));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&count));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&coded_len));
  if (levels < 2 || levels > 256) return Status::Corruption("segment alphabet outside [2, 256]");
  if (count > max_count) return Status::Corruption("segment holds more symbols than its chunk");
  std::span<const uint8_t> coded;
  KVSERVE_RETURN_IF_ERROR(r.GetSpan(coded_len, &coded));
  segment->levels = levels;
  segment->symbols.resize(count);
  return codec.Decode(coded, levels, count, segment->symbols.data());
}

// Streams a chunk's rows out of a KV view through a row-local transform.
class GatherSource final : public RowSource {
 public:
  GatherSource(const Transform& transform, const ChunkInfo& info, const KvSource& kv, int kind)
      : transform_(transform), info_(info), kv_(kv), kind_(kind) {}
  void Read(int head, int token, int count, float* out) override {
    GatherRows(kv_, info_.layer, kind_, head, info_.token_begin + token, count, out);
    transform_.TransformRows(info_, head, out, count, /*inverse=*/false);
  }

 private:
  const Transform& transform_;
  const ChunkInfo& info_;
  const KvSource& kv_;
  int kind_;
};

// Streams decoded rows through the inverse of a row-local transform into
// a KV view.
class ScatterSink final : public RowSink {
 public:
  ScatterSink(const Transform& transform, const ChunkInfo& info, const KvTarget& out,
              int kind, bool stream)
      : transform_(transform), info_(info), out_(out), kind_(kind), stream_(stream) {}
  void Write(int head, int token, int count, float* rows) override {
    transform_.TransformRows(info_, head, rows, count, /*inverse=*/true);
    ScatterRows(rows, out_, info_.layer, kind_, head, info_.token_begin + token, count, stream_);
  }
  void WriteZeros(int head, int token, int count) override {
    ZeroRows(out_, info_.layer, kind_, head, info_.token_begin + token, count);
  }

 private:
  const Transform& transform_;
  const ChunkInfo& info_;
  const KvTarget& out_;
  int kind_;
  bool stream_;
};

// Appends a raw record's single segment for a codec that stores 256-level
// symbols verbatim: the header, then the region's bytes gathered straight
// into `out` (no intermediate copy).
void AppendVerbatimRawSegment(const KvSource& kv, const ChunkSlot& slot, size_t bytes,
                              std::vector<uint8_t>* out) {
  ByteWriter w(out);
  w.PutU16(256);
  w.PutU32(static_cast<uint32_t>(bytes));
  w.PutU32(static_cast<uint32_t>(bytes));
  const size_t at = out->size();
  out->resize(at + bytes);
  GatherRawBytes(kv, slot.layer, slot.kind, slot.token_begin, slot.tokens, out->data() + at);
}

}  // namespace

Status EncodeChunk(const Stages& stages, const KvSource& kv, const ChunkSlot& slot,
                   ChunkScratch& scratch, std::vector<uint8_t>* out, FrameStats* stats) {
  const size_t record_start = out->size();
  out->resize(record_start + kRecordHeaderBytes);
  const size_t elements = ChunkElements(kv.shape(), slot.tokens);
  uint64_t payload = 0;
  if (slot.type == RecordType::kRaw) {
    const size_t raw_bytes = elements * DTypeSize(kv.dtype());
    if (stages.codec->StoresVerbatim(256) && raw_bytes <= UINT32_MAX) {
      AppendVerbatimRawSegment(kv, slot, raw_bytes, out);
      payload = raw_bytes;
    } else {
      scratch.quantized.segments.resize(1);
      CodeSegment& seg = scratch.quantized.segments[0];
      seg.levels = 256;
      seg.symbols.resize(raw_bytes);
      GatherRawBytes(kv, slot.layer, slot.kind, slot.token_begin, slot.tokens,
                     seg.symbols.data());
      KVSERVE_RETURN_IF_ERROR(AppendSegment(*stages.codec, seg, out, &payload));
    }
    stats->raw_bytes += payload;
    stats->record_header_bytes += 10;
  } else {
    const ChunkInfo info = MakeInfo(kv.shape(), kv.dtype(), slot);
    scratch.side.clear();
    if (stages.transform->RowLocal(kv.shape().head_dim)) {
      // Gather, transform and quantise a tile at a time; no side bytes.
      GatherSource source(*stages.transform, info, kv, slot.kind);
      KVSERVE_RETURN_IF_ERROR(stages.quantizer->QuantizeRows(info, source, &scratch.quantized));
    } else {
      scratch.values.resize(elements);
      GatherChunk(kv, slot.layer, slot.kind, slot.token_begin, slot.tokens,
                  scratch.values.data());
      ChunkTensor x{scratch.values.data(), kv.shape().kv_heads, slot.tokens, kv.shape().head_dim};
      ByteWriter side(&scratch.side);
      KVSERVE_RETURN_IF_ERROR(stages.transform->Forward(info, x, side));
      KVSERVE_RETURN_IF_ERROR(stages.quantizer->Quantize(info, x, &scratch.quantized));
    }
    const auto& q = scratch.quantized;
    if (q.segments.size() > kMaxSegments)
      return Status::Internal("quantizer produced too many segments");
    ByteWriter w(out);
    w.PutU32(static_cast<uint32_t>(scratch.side.size()));
    w.PutBytes(scratch.side.data(), scratch.side.size());
    w.PutU32(static_cast<uint32_t>(q.params.size()));
    w.PutBytes(q.params.data(), q.params.size());
    w.PutU16(static_cast<uint16_t>(q.segments.size()));
    for (const CodeSegment& seg : q.segments)
      KVSERVE_RETURN_IF_ERROR(AppendSegment(*stages.codec, seg, out, &payload));
    stats->transform_bytes += scratch.side.size();
    stats->param_bytes += q.params.size();
    stats->code_bytes += payload;
    stats->record_header_bytes += 4 + 4 + 2 + 10 * q.segments.size();
  }
  const size_t body = out->size() - record_start - kRecordHeaderBytes;
  if (body > UINT32_MAX) return Status::ResourceExhausted("chunk record larger than 4 GiB");
  RecordHeader rh{slot.type, static_cast<uint8_t>(slot.kind), static_cast<uint32_t>(slot.layer),
                  static_cast<uint32_t>(slot.token_begin), static_cast<uint32_t>(slot.tokens),
                  static_cast<uint32_t>(body)};
  WriteRecordHeader(rh, out->data() + record_start);
  const uint32_t crc = Checksum32(out->data() + record_start, out->size() - record_start);
  ByteWriter(out).PutU32(crc);
  stats->record_header_bytes += kRecordHeaderBytes + kRecordChecksumBytes;
  stats->chunks += 1;
  return Status::Ok();
}

Status DecodeChunk(const Stages& stages, std::span<const uint8_t> record, const ChunkSlot& slot,
                   ChunkScratch& scratch, const KvTarget& out, uint8_t* keep_mask) {
  ByteReader r(record.subspan(kRecordHeaderBytes,
                              record.size() - kRecordHeaderBytes - kRecordChecksumBytes));
  const KvShape& shape = out.shape();
  const size_t elements = ChunkElements(shape, slot.tokens);
  auto mask_row = [&](int h) {
    return keep_mask + ((static_cast<size_t>(slot.layer) * 2 + slot.kind) * shape.kv_heads + h) *
                           shape.tokens + slot.token_begin;
  };
  if (slot.type == RecordType::kRaw) {
    const size_t raw_bytes = elements * DTypeSize(out.dtype());
    // Stores the region's source bytes (cache-bypassing for large outputs).
    auto store_raw = [&](const uint8_t* bytes) {
      const bool stream = PreferStreamingStores(out);
      ScatterRawBytes(bytes, out, slot.layer, slot.kind, slot.token_begin, slot.tokens, stream);
      if (stream) FinishStreamingStores();
      if (keep_mask)
        for (int h = 0; h < shape.kv_heads; ++h) std::memset(mask_row(h), 1, slot.tokens);
    };
    if (stages.codec->StoresVerbatim(256)) {
      // The codec's bytes are the region's bytes: when the segment header
      // says exactly that, scatter straight from the record. Anything else
      // takes the general path below, which reports the precise error.
      ByteReader peek = r;
      uint16_t levels = 0;
      uint32_t count = 0, coded_len = 0;
      std::span<const uint8_t> coded;
      if (peek.GetU16(&levels).ok() && peek.GetU32(&count).ok() &&
          peek.GetU32(&coded_len).ok() && levels == 256 && count == raw_bytes &&
          coded_len == raw_bytes && peek.GetSpan(coded_len, &coded).ok() && peek.done()) {
        store_raw(coded.data());
        return Status::Ok();
      }
    }
    scratch.quantized.segments.resize(1);
    CodeSegment& seg = scratch.quantized.segments[0];
    KVSERVE_RETURN_IF_ERROR(ReadSegment(*stages.codec, r, raw_bytes, &seg));
    if (seg.levels != 256 || seg.symbols.size() != raw_bytes)
      return Status::Corruption("raw record size does not match its token range");
    if (!r.done()) return Status::Corruption("trailing bytes in raw record");
    store_raw(seg.symbols.data());
    return Status::Ok();
  }
  uint32_t side_len, params_len;
  uint16_t segments;
  std::span<const uint8_t> side_bytes, params;
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&side_len));
  KVSERVE_RETURN_IF_ERROR(r.GetSpan(side_len, &side_bytes));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&params_len));
  KVSERVE_RETURN_IF_ERROR(r.GetSpan(params_len, &params));
  KVSERVE_RETURN_IF_ERROR(r.GetU16(&segments));
  QuantizedChunk& q = scratch.quantized;
  q.params.assign(params.begin(), params.end());
  q.segments.resize(segments);
  size_t symbols_left = elements;
  for (uint16_t s = 0; s < segments; ++s) {
    KVSERVE_RETURN_IF_ERROR(ReadSegment(*stages.codec, r, symbols_left, &q.segments[s]));
    symbols_left -= q.segments[s].symbols.size();
  }
  if (!r.done()) return Status::Corruption("trailing bytes in coded record");
  const ChunkInfo info = MakeInfo(shape, out.dtype(), slot);
  if (side_bytes.empty() && stages.transform->RowLocal(shape.head_dim)) {
    // Dequantise, inverse-transform and store a tile at a time. (Side bytes
    // for a row-local transform are corrupt; the general path reports them.)
    scratch.mask.assign(static_cast<size_t>(shape.kv_heads) * slot.tokens, 1);
    const bool stream = PreferStreamingStores(out);
    ScatterSink sink(*stages.transform, info, out, slot.kind, stream);
    const Status status = stages.quantizer->DequantizeRows(info, q, sink, scratch.mask.data());
    if (stream) FinishStreamingStores();
    KVSERVE_RETURN_IF_ERROR(status);
    if (keep_mask)
      for (int h = 0; h < shape.kv_heads; ++h)
        std::memcpy(mask_row(h), scratch.mask.data() + static_cast<size_t>(h) * slot.tokens,
                    slot.tokens);
    return Status::Ok();
  }
  scratch.values.resize(elements);
  ChunkTensor x{scratch.values.data(), shape.kv_heads, slot.tokens, shape.head_dim};
  scratch.mask.assign(static_cast<size_t>(shape.kv_heads) * slot.tokens, 1);
  KVSERVE_RETURN_IF_ERROR(stages.quantizer->Dequantize(info, q, x, scratch.mask.data()));
  ByteReader side(side_bytes);
  KVSERVE_RETURN_IF_ERROR(stages.transform->Inverse(info, x, side));
  if (!side.done()) return Status::Corruption("trailing transform side bytes");
  // Pruned tokens decode as exact zeros whatever the transform did to them.
  for (int h = 0; h < shape.kv_heads; ++h)
    for (int t = 0; t < slot.tokens; ++t)
      if (!scratch.mask[static_cast<size_t>(h) * slot.tokens + t])
        std::memset(x.row(h, t), 0, sizeof(float) * shape.head_dim);
  ScatterChunk(x.data, out, slot.layer, slot.kind, slot.token_begin, slot.tokens);
  if (keep_mask)
    for (int h = 0; h < shape.kv_heads; ++h)
      std::memcpy(mask_row(h), scratch.mask.data() + static_cast<size_t>(h) * slot.tokens,
                  slot.tokens);
  return Status::Ok();
}

Status InspectChunk(std::span<const uint8_t> record, FrameStats* stats) {
  RecordHeader rh;
  KVSERVE_RETURN_IF_ERROR(ReadRecordHeader(record, &rh));
  ByteReader r(record.subspan(kRecordHeaderBytes, rh.body_bytes));
  auto skip_segment = [&](uint64_t* payload) -> Status {
    uint16_t levels;
    uint32_t count, len;
    std::span<const uint8_t> s;
    KVSERVE_RETURN_IF_ERROR(r.GetU16(&levels));
    KVSERVE_RETURN_IF_ERROR(r.GetU32(&count));
    KVSERVE_RETURN_IF_ERROR(r.GetU32(&len));
    KVSERVE_RETURN_IF_ERROR(r.GetSpan(len, &s));
    *payload += len;
    stats->record_header_bytes += 10;
    return Status::Ok();
  };
  if (rh.type == RecordType::kRaw) {
    KVSERVE_RETURN_IF_ERROR(skip_segment(&stats->raw_bytes));
  } else {
    uint32_t side_len, params_len;
    uint16_t segments;
    std::span<const uint8_t> s;
    KVSERVE_RETURN_IF_ERROR(r.GetU32(&side_len));
    KVSERVE_RETURN_IF_ERROR(r.GetSpan(side_len, &s));
    KVSERVE_RETURN_IF_ERROR(r.GetU32(&params_len));
    KVSERVE_RETURN_IF_ERROR(r.GetSpan(params_len, &s));
    KVSERVE_RETURN_IF_ERROR(r.GetU16(&segments));
    stats->transform_bytes += side_len;
    stats->param_bytes += params_len;
    stats->record_header_bytes += 10;
    for (uint16_t i = 0; i < segments; ++i) KVSERVE_RETURN_IF_ERROR(skip_segment(&stats->code_bytes));
  }
  if (!r.done()) return Status::Corruption("trailing bytes in record body");
  stats->record_header_bytes += kRecordHeaderBytes + kRecordChecksumBytes;
  stats->chunks += 1;
  return Status::Ok();
}

}  // namespace kvserve::pipeline
