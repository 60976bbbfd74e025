#include "pipeline/frame_format.h"

#include <cstring>

#include "core/checksum.h"
#include "core/stages.h"

namespace kvserve::pipeline {
namespace {

int64_t Blocks(int64_t n, int64_t block) { return n <= 0 ? 0 : (n + block - 1) / block; }

}  // namespace

int64_t RecordsPerLayer(const KvShape& shape, int chunk_tokens, int coded_tokens) {
  const int64_t coded = Blocks(coded_tokens, chunk_tokens);
  const int64_t raw = Blocks(int64_t{shape.tokens} - coded_tokens, chunk_tokens);
  return 2 * (coded + raw);
}

std::vector<ChunkSlot> PlanChunks(const KvShape& shape, int chunk_tokens, int coded_tokens) {
  std::vector<ChunkSlot> slots;
  slots.reserve(static_cast<size_t>(RecordsPerLayer(shape, chunk_tokens, coded_tokens)) *
                shape.layers);
  for (int l = 0; l < shape.layers; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int t = 0; t < coded_tokens; t += chunk_tokens)
        slots.push_back({RecordType::kCoded, l, kind, t, std::min(chunk_tokens, coded_tokens - t)});
      for (int t = coded_tokens; t < shape.tokens; t += chunk_tokens)
        slots.push_back({RecordType::kRaw, l, kind, t, std::min(chunk_tokens, shape.tokens - t)});
    }
  }
  return slots;
}

ChunkSlot SlotAt(const KvShape& shape, int chunk_tokens, int coded_tokens, int64_t index) {
  const int64_t coded = Blocks(coded_tokens, chunk_tokens);
  const int64_t raw = Blocks(int64_t{shape.tokens} - coded_tokens, chunk_tokens);
  const int64_t per_kind = coded + raw;
  const int layer = static_cast<int>(index / (2 * per_kind));
  const int kind = static_cast<int>(index / per_kind % 2);
  const int64_t block = index % per_kind;
  if (block < coded) {
    const int t = static_cast<int>(block * chunk_tokens);
    return {RecordType::kCoded, layer, kind, t, std::min(chunk_tokens, coded_tokens - t)};
  }
  const int t = static_cast<int>(coded_tokens + (block - coded) * chunk_tokens);
  return {RecordType::kRaw, layer, kind, t, std::min(chunk_tokens, shape.tokens - t)};
}

int64_t SlotIndex(const KvShape& shape, int chunk_tokens, int coded_tokens, int layer, int kind,
                  RecordType type, int token_begin) {
  if (layer < 0 || layer >= shape.layers || kind < 0 || kind > 1) return -1;
  const int64_t coded = Blocks(coded_tokens, chunk_tokens);
  const int64_t raw = Blocks(int64_t{shape.tokens} - coded_tokens, chunk_tokens);
  int64_t index = int64_t{layer} * 2 * (coded + raw) + int64_t{kind} * (coded + raw);
  if (type == RecordType::kCoded) {
    if (token_begin < 0 || token_begin >= coded_tokens || token_begin % chunk_tokens != 0)
      return -1;
    return index + token_begin / chunk_tokens;
  }
  const int64_t offset = int64_t{token_begin} - coded_tokens;
  if (offset < 0 || token_begin >= shape.tokens || offset % chunk_tokens != 0) return -1;
  return index + coded + offset / chunk_tokens;
}

void WriteFrameHeader(const FrameHeader& h, std::vector<uint8_t>* out) {
  const size_t start = out->size();
  ByteWriter w(out);
  w.PutBytes(kFrameMagic, 4);
  w.PutU16(kFrameVersion);
  w.PutU8(static_cast<uint8_t>(h.dtype));
  w.PutU8(0);  // flags
  w.PutU32(static_cast<uint32_t>(h.shape.layers));
  w.PutU32(static_cast<uint32_t>(h.shape.kv_heads));
  w.PutU32(static_cast<uint32_t>(h.shape.tokens));
  w.PutU32(static_cast<uint32_t>(h.shape.head_dim));
  w.PutU32(h.chunk_tokens);
  w.PutU32(h.coded_tokens);
  w.PutU32(h.record_count);
  w.PutU16(static_cast<uint16_t>(h.profile_spec.size()));
  w.PutU32(static_cast<uint32_t>(h.state.size()));
  w.PutBytes(h.profile_spec.data(), h.profile_spec.size());
  w.PutBytes(h.state.data(), h.state.size());
  w.PutU64(Checksum64(out->data() + start, out->size() - start));
}

Result<size_t> FrameHeaderSize(std::span<const uint8_t> prefix) {
  if (prefix.size() < kFrameFixedHeaderBytes) return size_t{0};
  if (std::memcmp(prefix.data(), kFrameMagic, 4) != 0)
    return Status::Corruption("bad frame magic (not a kvserve frame)");
  // The profile and state lengths end the fixed header (docs/format.md §3).
  ByteReader r(prefix.subspan(kFrameFixedHeaderBytes - 6));
  uint16_t profile_len;
  uint32_t state_len;
  KVSERVE_RETURN_IF_ERROR(r.GetU16(&profile_len));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&state_len));
  if (profile_len > kMaxProfileBytes || state_len > kMaxStateBytes)
    return Status::Corruption("profile or state length outside limits");
  return kFrameFixedHeaderBytes + profile_len + state_len + kFrameChecksumBytes;
}

uint64_t RecordSize(std::span<const uint8_t> prefix) {
  if (prefix.size() < kRecordHeaderBytes) return 0;
  // The body length ends the record header (docs/format.md §5).
  ByteReader r(prefix.subspan(kRecordHeaderBytes - 4));
  uint32_t body_bytes = 0;
  (void)r.GetU32(&body_bytes);
  return uint64_t{kRecordHeaderBytes} + body_bytes + kRecordChecksumBytes;
}

Result<size_t> ReadFrameHeader(std::span<const uint8_t> bytes, FrameHeader* h) {
  if (bytes.size() < kFrameFixedHeaderBytes + kFrameChecksumBytes)
    return Status::Corruption("frame shorter than its fixed header");
  if (std::memcmp(bytes.data(), kFrameMagic, 4) != 0)
    return Status::Corruption("bad frame magic (not a kvserve frame)");
  ByteReader r(bytes.subspan(4));
  uint16_t version;
  uint8_t dtype, flags;
  uint32_t layers, heads, tokens, dim, chunk, coded, records, state_len;
  uint16_t profile_len;
  KVSERVE_RETURN_IF_ERROR(r.GetU16(&version));
  KVSERVE_RETURN_IF_ERROR(r.GetU8(&dtype));
  KVSERVE_RETURN_IF_ERROR(r.GetU8(&flags));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&layers));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&heads));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&tokens));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&dim));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&chunk));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&coded));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&records));
  KVSERVE_RETURN_IF_ERROR(r.GetU16(&profile_len));
  KVSERVE_RETURN_IF_ERROR(r.GetU32(&state_len));
  if (version != kFrameVersion)
    return Status::Corruption("unsupported frame version " + std::to_string(version));
  if (dtype > static_cast<uint8_t>(DType::kBF16)) return Status::Corruption("bad dtype code");
  if (flags != 0) return Status::Corruption("reserved header flags are set");
  if (layers == 0 || layers > kMaxLayers || heads == 0 || heads > kMaxKvHeads || tokens == 0 ||
      tokens > kMaxTokens || dim == 0 || dim > kMaxHeadDim)
    return Status::Corruption("frame shape outside decoder limits");
  if (chunk == 0 || chunk > kMaxTokens || coded > tokens)
    return Status::Corruption("bad chunk size or coded token count");
  if (profile_len == 0 || profile_len > kMaxProfileBytes || state_len > kMaxStateBytes)
    return Status::Corruption("profile or state length outside limits");
  const size_t total = kFrameFixedHeaderBytes + profile_len + state_len + kFrameChecksumBytes;
  if (bytes.size() < total) return Status::Corruption("frame header truncated");
  uint64_t expected;
  std::memcpy(&expected, bytes.data() + total - kFrameChecksumBytes, 8);
  if (Checksum64(bytes.data(), total - kFrameChecksumBytes) != expected)
    return Status::Corruption("frame header checksum mismatch");
  h->dtype = static_cast<DType>(dtype);
  h->shape = KvShape{static_cast<int32_t>(layers), static_cast<int32_t>(heads),
                     static_cast<int32_t>(tokens), static_cast<int32_t>(dim)};
  h->chunk_tokens = chunk;
  h->coded_tokens = coded;
  h->record_count = records;
  const uint8_t* p = bytes.data() + kFrameFixedHeaderBytes;
  h->profile_spec.assign(reinterpret_cast<const char*>(p), profile_len);
  h->state.assign(p + profile_len, p + profile_len + state_len);
  if (int64_t{records} !=
      RecordsPerLayer(h->shape, static_cast<int>(chunk), static_cast<int>(coded)) * layers)
    return Status::Corruption("record count does not match the frame's chunk plan");
  return total;
}

void WriteRecordHeader(const RecordHeader& h, uint8_t out[kRecordHeaderBytes]) {
  out[0] = static_cast<uint8_t>(h.type);
  out[1] = h.kind;
  out[2] = 0;
  out[3] = 0;
  std::memcpy(out + 4, &h.layer, 4);
  std::memcpy(out + 8, &h.token_begin, 4);
  std::memcpy(out + 12, &h.tokens, 4);
  std::memcpy(out + 16, &h.body_bytes, 4);
}

Status ReadRecordHeader(std::span<const uint8_t> bytes, RecordHeader* h) {
  if (bytes.size() < kRecordHeaderBytes) return Status::Corruption("record header truncated");
  const uint8_t type = bytes[0];
  if (type != static_cast<uint8_t>(RecordType::kCoded) &&
      type != static_cast<uint8_t>(RecordType::kRaw))
    return Status::Corruption("bad record type " + std::to_string(type));
  if (bytes[1] > 1) return Status::Corruption("bad record kind");
  if (bytes[2] != 0 || bytes[3] != 0) return Status::Corruption("reserved record bytes are set");
  h->type = static_cast<RecordType>(type);
  h->kind = bytes[1];
  std::memcpy(&h->layer, bytes.data() + 4, 4);
  std::memcpy(&h->token_begin, bytes.data() + 8, 4);
  std::memcpy(&h->tokens, bytes.data() + 12, 4);
  std::memcpy(&h->body_bytes, bytes.data() + 16, 4);
  return Status::Ok();
}

}  // namespace kvserve::pipeline
