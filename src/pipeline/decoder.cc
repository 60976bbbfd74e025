// DecoderContext and InspectFrame: validate a frame's header and record
// table against the chunk plan the header implies, then decode records in
// parallel into the caller's view. Every length is checked against the
// bytes actually present before it is used, and nothing is allocated in
// proportion to what a header declares (docs/format.md §7): the plan is
// computed slot by slot, a record count is checked against the bytes that
// could hold it, and a streaming decoder remembers only the records it got.
#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_set>

#include "core/checksum.h"
#include "core/thread_pool.h"
#include "kvserve/codec.h"
#include "pipeline/chunk_codec.h"
#include "pipeline/frame_format.h"
#include "pipeline/gather.h"
#include "core/stages.h"

namespace kvserve {
namespace {

using pipeline::ChunkScratch;
using pipeline::ChunkSlot;
using pipeline::RecordHeader;
using pipeline::RecordType;

// A frame's header, parsed and checked, and the plan it implies.
struct ParsedHeader {
  pipeline::FrameHeader header;
  Profile profile;
  size_t header_bytes = 0;
  size_t records() const { return header.record_count; }
  ChunkSlot slot(int64_t index) const {
    return pipeline::SlotAt(header.shape, static_cast<int>(header.chunk_tokens),
                            static_cast<int>(header.coded_tokens), index);
  }
};

// Corruption unless the bytes after the header can hold every record the
// header declares: checked before anything is sized by the record count.
Status CheckRecordRoom(const ParsedHeader& p, size_t frame_bytes) {
  const size_t room = (frame_bytes - p.header_bytes) / pipeline::kMinRecordBytes;
  if (p.records() > room)
    return Status::Corruption("frame of " + std::to_string(frame_bytes) +
                              " bytes is too short for the " + std::to_string(p.records()) +
                              " chunk records its header declares");
  return Status::Ok();
}

Result<ParsedHeader> ParseHeader(std::span<const uint8_t> bytes) {
  ParsedHeader p;
  KVSERVE_ASSIGN_OR_RETURN(p.header_bytes, pipeline::ReadFrameHeader(bytes, &p.header));
  auto profile = Profile::Parse(p.header.profile_spec);
  if (!profile.ok())
    return Status::Corruption("frame names an invalid profile: " + profile.status().message());
  p.profile = std::move(profile).value();
  if (p.profile.Get(ParamId::kChunkTokens) != p.header.chunk_tokens)
    return Status::Corruption("frame chunk size disagrees with its profile");
  return p;
}

// Splits the front of `bytes` into one record; checks it fits and matches a
// planned slot. Returns the slot index; `record_size` gets its byte length.
Result<int64_t> LocateRecord(const ParsedHeader& p, std::span<const uint8_t> bytes,
                             size_t* record_size) {
  RecordHeader rh;
  KVSERVE_RETURN_IF_ERROR(pipeline::ReadRecordHeader(bytes, &rh));
  const uint64_t size = uint64_t{pipeline::kRecordHeaderBytes} + rh.body_bytes +
                        pipeline::kRecordChecksumBytes;
  if (size > bytes.size()) return Status::Corruption("chunk record truncated");
  const int64_t index = pipeline::SlotIndex(
      p.header.shape, static_cast<int>(p.header.chunk_tokens),
      static_cast<int>(p.header.coded_tokens), static_cast<int>(std::min<uint32_t>(rh.layer, INT32_MAX)),
      rh.kind, rh.type, static_cast<int>(std::min<uint32_t>(rh.token_begin, INT32_MAX)));
  if (index < 0) return Status::Corruption("chunk record does not match the frame's chunk plan");
  if (static_cast<uint32_t>(p.slot(index).tokens) != rh.tokens)
    return Status::Corruption("chunk record token count disagrees with the chunk plan");
  *record_size = static_cast<size_t>(size);
  return index;
}

Status VerifyChecksum(std::span<const uint8_t> record) {
  uint32_t stored;
  std::memcpy(&stored, record.data() + record.size() - 4, 4);
  if (Checksum32(record.data(), record.size() - 4) != stored)
    return Status::Corruption("chunk record checksum mismatch");
  return Status::Ok();
}

class DecoderContextImpl final : public DecoderContext {
 public:
  explicit DecoderContextImpl(const DecodeOptions& options) : options_(options) {
    if (options.threads > 1) own_pool_ = std::make_unique<ThreadPool>(options.threads);
  }

  Status Decode(std::span<const uint8_t> frame, const MutableKvView& out,
                std::vector<uint8_t>* keep_mask) override {
    return DecodeWhole(frame, out, keep_mask);
  }
  Status Decode(std::span<const uint8_t> frame, const MutablePagedKvView& out,
                std::vector<uint8_t>* keep_mask) override {
    return DecodeWhole(frame, out, keep_mask);
  }

  Result<size_t> DecodeRecord(std::span<const uint8_t> bytes, const MutableKvView& out,
                              std::vector<uint8_t>* keep_mask) override {
    return DecodeOneRecord(bytes, out, keep_mask);
  }
  Result<size_t> DecodeRecord(std::span<const uint8_t> bytes, const MutablePagedKvView& out,
                              std::vector<uint8_t>* keep_mask) override {
    return DecodeOneRecord(bytes, out, keep_mask);
  }

  Status DecodeWhole(std::span<const uint8_t> frame, const pipeline::KvTarget& out,
                     std::vector<uint8_t>* keep_mask) {
    KVSERVE_ASSIGN_OR_RETURN(size_t pos, Start(frame));
    KVSERVE_RETURN_IF_ERROR(CheckOutput(out));
    KVSERVE_RETURN_IF_ERROR(CheckRecordRoom(parsed_, frame.size()));
    const size_t n = parsed_.records();
    std::vector<std::span<const uint8_t>> records(n);
    for (size_t i = 0; i < n; ++i) {
      size_t size = 0;
      KVSERVE_ASSIGN_OR_RETURN(int64_t index, LocateRecord(parsed_, frame.subspan(pos), &size));
      if (!records[index].empty()) return Status::Corruption("duplicate chunk record");
      records[index] = frame.subspan(pos, size);
      pos += size;
    }
    if (pos != frame.size()) return Status::Corruption("trailing bytes after the last record");
    uint8_t* mask = PrepareMask(keep_mask);
    std::vector<Status> status(n);
    auto work = [&](size_t i) {
      thread_local ChunkScratch scratch;
      status[i] = VerifyChecksum(records[i]);
      if (status[i].ok())
        status[i] = pipeline::DecodeChunk(stages_, records[i], parsed_.slot(static_cast<int64_t>(i)),
                                          scratch, out, mask);
    };
    if (options_.threads == 1) {
      for (size_t i = 0; i < n; ++i) work(i);
    } else {
      pool().ParallelFor(n, work);
    }
    for (size_t i = 0; i < n; ++i)
      if (!status[i].ok()) return status[i].WithContext("record " + std::to_string(i));
    all_seen_ = true;
    return Status::Ok();
  }

  Result<size_t> Start(std::span<const uint8_t> bytes) override {
    started_ = false;
    KVSERVE_ASSIGN_OR_RETURN(parsed_, ParseHeader(bytes));
    KVSERVE_ASSIGN_OR_RETURN(stages_.transform, pipeline::CreateTransform(parsed_.profile));
    KVSERVE_ASSIGN_OR_RETURN(stages_.codec, pipeline::CreateCodec(parsed_.profile));
    auto quantizer = pipeline::CreateQuantizerForDecode(parsed_.profile, parsed_.header.shape,
                                                        parsed_.header.state);
    if (!quantizer.ok()) {
      return Status::Corruption("frame quantizer state: " + quantizer.status().message());
    }
    stages_.quantizer = std::move(quantizer).value();
    if (static_cast<int64_t>(parsed_.header.coded_tokens) !=
        std::clamp(stages_.quantizer->CodedTokens(parsed_.header.shape.tokens), 0,
                   parsed_.header.shape.tokens))
      return Status::Corruption("frame coded-token count disagrees with its profile");
    info_ = FrameInfo{};
    info_.version = pipeline::kFrameVersion;
    info_.dtype = parsed_.header.dtype;
    info_.shape = parsed_.header.shape;
    info_.profile = parsed_.profile;
    info_.chunk_count = parsed_.header.record_count;
    info_.stats.header_bytes = parsed_.header_bytes;
    seen_.clear();
    all_seen_ = false;
    started_ = true;
    return parsed_.header_bytes;
  }

  Result<size_t> DecodeOneRecord(std::span<const uint8_t> bytes, const pipeline::KvTarget& out,
                                 std::vector<uint8_t>* keep_mask) {
    if (!started_) return Status::InvalidArgument("DecodeRecord called before Start");
    KVSERVE_RETURN_IF_ERROR(CheckOutput(out));
    size_t size = 0;
    KVSERVE_ASSIGN_OR_RETURN(int64_t index, LocateRecord(parsed_, bytes, &size));
    if (all_seen_ || seen_.count(index) != 0) return Status::Corruption("duplicate chunk record");
    const auto record = bytes.subspan(0, size);
    KVSERVE_RETURN_IF_ERROR(VerifyChecksum(record));
    uint8_t* mask = nullptr;
    if (keep_mask) {
      const size_t want = static_cast<size_t>(info_.shape.NumElements() / info_.shape.head_dim);
      if (keep_mask->size() != want) keep_mask->assign(want, 1);
      mask = keep_mask->data();
    }
    thread_local ChunkScratch scratch;
    KVSERVE_RETURN_IF_ERROR(
        pipeline::DecodeChunk(stages_, record, parsed_.slot(index), scratch, out, mask));
    seen_.insert(index);
    return size;
  }

  const FrameInfo& info() const override { return info_; }

 private:
  ThreadPool& pool() { return own_pool_ ? *own_pool_ : ThreadPool::Shared(); }

  Status CheckOutput(const pipeline::KvTarget& out) const {
    KVSERVE_RETURN_IF_ERROR(out.Validate());
    if (!(out.shape() == info_.shape))
      return Status::InvalidArgument("output view shape does not match the frame");
    if (out.dtype() != info_.dtype)
      return Status::InvalidArgument("output view dtype " + std::string(DTypeName(out.dtype())) +
                                     " does not match the frame's " +
                                     std::string(DTypeName(info_.dtype)));
    return Status::Ok();
  }

  uint8_t* PrepareMask(std::vector<uint8_t>* keep_mask) const {
    if (!keep_mask) return nullptr;
    keep_mask->assign(static_cast<size_t>(info_.shape.NumElements() / info_.shape.head_dim), 1);
    return keep_mask->data();
  }

  DecodeOptions options_;
  std::unique_ptr<ThreadPool> own_pool_;
  ParsedHeader parsed_;
  pipeline::Stages stages_;
  FrameInfo info_;
  // Records decoded since Start: grows with the records received, never
  // with the count the header declares.
  std::unordered_set<int64_t> seen_;
  bool all_seen_ = false;  // Decode consumed the whole frame
  bool started_ = false;
};

}  // namespace

Result<std::unique_ptr<DecoderContext>> DecoderContext::Create(const DecodeOptions& options) {
  if (options.threads < 0) return Status::InvalidArgument("threads must be >= 0");
  return std::unique_ptr<DecoderContext>(std::make_unique<DecoderContextImpl>(options));
}

Result<FrameInfo> InspectFrame(std::span<const uint8_t> frame) {
  KVSERVE_ASSIGN_OR_RETURN(ParsedHeader p, ParseHeader(frame));
  FrameInfo info;
  info.version = pipeline::kFrameVersion;
  info.dtype = p.header.dtype;
  info.shape = p.header.shape;
  info.profile = p.profile;
  info.chunk_count = p.header.record_count;
  info.stats.header_bytes = p.header_bytes;
  size_t pos = p.header_bytes;
  KVSERVE_RETURN_IF_ERROR(CheckRecordRoom(p, frame.size()));
  std::vector<bool> seen(p.records(), false);
  for (size_t i = 0; i < p.records(); ++i) {
    size_t size = 0;
    KVSERVE_ASSIGN_OR_RETURN(int64_t index, LocateRecord(p, frame.subspan(pos), &size));
    if (seen[index]) return Status::Corruption("duplicate chunk record");
    seen[index] = true;
    const auto record = frame.subspan(pos, size);
    KVSERVE_RETURN_IF_ERROR(VerifyChecksum(record).WithContext("record " + std::to_string(i)));
    KVSERVE_RETURN_IF_ERROR(pipeline::InspectChunk(record, &info.stats));
    const ChunkSlot s = p.slot(index);
    info.chunks.push_back(ChunkEntry{pos, size, s.layer, s.kind, s.token_begin, s.tokens,
                                     s.type == RecordType::kRaw});
    pos += size;
  }
  if (pos != frame.size()) return Status::Corruption("trailing bytes after the last record");
  info.stats.total_bytes = frame.size();
  return info;
}

Result<KvCache> DecodeFrame(std::span<const uint8_t> frame, uint64_t max_output_bytes,
                            const DecodeOptions& options, FrameInfo* info_out,
                            std::vector<uint8_t>* keep_mask) {
  KVSERVE_ASSIGN_OR_RETURN(FrameInfo info, InspectFrame(frame));
  const uint64_t bytes = static_cast<uint64_t>(info.shape.NumElements()) * DTypeSize(info.dtype);
  if (bytes > max_output_bytes)
    return Status::ResourceExhausted("frame decodes to " + std::to_string(bytes) +
                                     " bytes, above the output budget of " +
                                     std::to_string(max_output_bytes));
  KVSERVE_ASSIGN_OR_RETURN(auto decoder, DecoderContext::Create(options));
  KvCache out(info.dtype, info.shape);
  KVSERVE_RETURN_IF_ERROR(decoder->Decode(frame, out.mutable_view(), keep_mask));
  if (info_out) *info_out = std::move(info);
  return out;
}

}  // namespace kvserve
