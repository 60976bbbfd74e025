// Copyright kvserve authors. Encoding and decoding KV caches into frames.
//
// A frame (docs/format.md) is a header followed by independently decodable
// chunk records, one per (layer, K/V, token block), each with its own
// checksum. Encoding writes through a ByteSink; a CountingSink gives the
// exact encoded size without storing it. Decoding writes into a caller view.
//
// Contexts are reusable and hold scratch memory; use one per thread (a
// context is not thread-safe, but internally it may run chunks on a pool).
#ifndef KVSERVE_CODEC_H_
#define KVSERVE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvserve/kv.h"
#include "kvserve/paged.h"
#include "kvserve/profile.h"
#include "kvserve/status.h"

namespace kvserve {

// Destination of encoded bytes. Append is called with consecutive pieces of
// the frame in order; an error stops encoding and is returned to the caller.
// With EncodeOptions::threads != 1 the encoder may call Append from one of
// its worker threads (so appending overlaps encoding), but never two calls at
// once, always in frame order, and every call happens-before the Encode call
// returns: a sink needs no locking, only no affinity to the calling thread.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status Append(std::span<const uint8_t> bytes) = 0;
};

// Counts bytes and discards them: the exact encoded size.
class CountingSink final : public ByteSink {
 public:
  Status Append(std::span<const uint8_t> bytes) override {
    count_ += bytes.size();
    return Status::Ok();
  }
  uint64_t count() const { return count_; }

 private:
  uint64_t count_ = 0;
};

// Appends to a caller-owned vector.
class VectorSink final : public ByteSink {
 public:
  explicit VectorSink(std::vector<uint8_t>* out) : out_(out) {}
  Status Append(std::span<const uint8_t> bytes) override {
    out_->insert(out_->end(), bytes.begin(), bytes.end());
    return Status::Ok();
  }

 private:
  std::vector<uint8_t>* out_;
};

// Per-(layer, kv_head) retrieval scores (DuoAttention-style calibration);
// higher means more retrieval-like. Read by mixhq and duo at encode time.
// File format (JSON): {"layers":L,"kv_heads":H,"scores":[[...H floats]...L rows]}.
struct HeadScores {
  int layers = 0;
  int kv_heads = 0;
  std::vector<float> scores;  // [layer][head], row-major
  float at(int layer, int head) const {
    return scores[static_cast<size_t>(layer) * kv_heads + head];
  }
  // Loads the JSON file at `path`: NotFound if it does not exist, IOError if
  // it cannot be read, Corruption (message names the path) if it is not the
  // format above: bad JSON, layers/kv_heads not in [1, 65536], row count or
  // length mismatch, a score that is not a finite float.
  static Result<HeadScores> Load(const std::string& path);
  // Writes the JSON form to `path` (via a sibling ".tmp" and a rename).
  // InvalidArgument if scores.size() != layers * kv_heads or a score is not
  // finite; IOError if the file cannot be written.
  Status Save(const std::string& path) const;
};

struct EncodeOptions {
  // Worker threads for chunk-parallel encoding; 0 = hardware concurrency,
  // 1 = run on the calling thread.
  int threads = 0;
  // Required by mixhq and duo; ignored otherwise. Must outlive the context.
  const HeadScores* head_scores = nullptr;
};

struct DecodeOptions {
  int threads = 0;  // as EncodeOptions::threads
};

// Bytes per section of a frame, as reported by Inspect and by the encoder.
struct FrameStats {
  uint64_t header_bytes = 0;        // frame header incl. profile string and state
  uint64_t record_header_bytes = 0; // per-chunk record headers and checksums
  uint64_t transform_bytes = 0;     // transform side info (affine params ...)
  uint64_t param_bytes = 0;         // scales and zero points
  uint64_t code_bytes = 0;          // codec payload of quantised codes
  uint64_t raw_bytes = 0;           // codec payload of raw (residual) tokens
  uint64_t total_bytes = 0;         // everything above: the size on the wire
  uint64_t chunks = 0;
};

// One chunk record's place in a frame.
struct ChunkEntry {
  uint64_t offset = 0;  // byte offset of the record in the frame
  uint64_t size = 0;    // bytes of the record
  int32_t layer = 0;
  int32_t kind = 0;
  int32_t token_begin = 0;
  int32_t tokens = 0;
  bool raw = false;     // raw (residual) region or coded region
};

struct FrameInfo {
  uint16_t version = 0;
  DType dtype = DType::kF32;
  KvShape shape;
  Profile profile;
  uint64_t chunk_count = 0;  // records the frame must contain
  FrameStats stats;
  std::vector<ChunkEntry> chunks;  // filled by Inspect
};

// Encodes KV caches with one profile. Not thread-safe; reusable.
class EncoderContext {
 public:
  // InvalidArgument if the profile is invalid.
  static Result<std::unique_ptr<EncoderContext>> Create(const Profile& profile,
                                                        const EncodeOptions& options = {});
  virtual ~EncoderContext() = default;

  // Encodes the whole cache `kv` as one frame into `sink`. On error nothing
  // more is appended, and the sink may hold a partial frame.
  virtual Status Encode(const KvView& kv, ByteSink& sink) = 0;

  // Layer-at-a-time streaming: Begin writes the frame header; EncodeLayer(l)
  // writes every chunk record of layer l (reading only layer l of `kv`);
  // layers may come in any order, each exactly once; Finish checks all
  // layers were written. The bytes equal those of Encode on the same cache.
  virtual Status Begin(const KvShape& shape, DType dtype, ByteSink& sink) = 0;
  virtual Status EncodeLayer(int layer, const KvView& kv) = 0;
  virtual Status Finish() = 0;

  // The same, gathering the KV from an engine's pages (kvserve/paged.h):
  // the bytes equal those of the contiguous cache with the same elements,
  // whatever the layout, block size or block table. InvalidArgument when
  // the view does not Validate (or, for EncodeLayer, its shape or dtype
  // differs from Begin's).
  virtual Status Encode(const PagedKvView& kv, ByteSink& sink) = 0;
  virtual Status EncodeLayer(int layer, const PagedKvView& kv) = 0;

  // Section sizes of the last frame (or the one in progress).
  virtual const FrameStats& stats() const = 0;
  virtual const Profile& profile() const = 0;
};

// Decodes frames. Not thread-safe; reusable.
class DecoderContext {
 public:
  static Result<std::unique_ptr<DecoderContext>> Create(const DecodeOptions& options = {});
  virtual ~DecoderContext() = default;

  // Decodes the complete frame `frame` into `out`, whose shape and dtype
  // must match the frame's (InvalidArgument otherwise). If `keep_mask` is
  // non-null it is resized to layers*2*kv_heads*tokens ([layer][kind][head]
  // [token]) and receives 0 for tokens pruned by the profile, else 1.
  // Corruption for any malformed, truncated or checksum-failing input; memory
  // allocated is bounded by the sizes the header declares, themselves
  // bounded by the input length. After an error the contents of `out` are
  // unspecified (rows of records decoded before the failing one, or part of
  // it, may have been written): callers must not use `out` (the serving path
  // discards the whole KV).
  virtual Status Decode(std::span<const uint8_t> frame, const MutableKvView& out,
                        std::vector<uint8_t>* keep_mask = nullptr) = 0;

  // Streaming: Start parses a header from the front of `bytes` and returns
  // how many bytes it used; DecodeRecord decodes one chunk record from the
  // front of `bytes` into `out` and returns the bytes used. A receiver calls
  // DecodeRecord as records arrive, in any order.
  virtual Result<size_t> Start(std::span<const uint8_t> bytes) = 0;
  virtual Result<size_t> DecodeRecord(std::span<const uint8_t> bytes, const MutableKvView& out,
                                      std::vector<uint8_t>* keep_mask = nullptr) = 0;

  // The same, scattering into a receiver's pages (kvserve/paged.h; its own
  // layout and block table): the elements written equal those a contiguous
  // output would receive, and slots outside the request's tokens are not
  // touched. InvalidArgument when the view does not Validate (a table
  // naming a block twice included) or its shape or dtype differs from the
  // frame's; input errors as above.
  virtual Status Decode(std::span<const uint8_t> frame, const MutablePagedKvView& out,
                        std::vector<uint8_t>* keep_mask = nullptr) = 0;
  virtual Result<size_t> DecodeRecord(std::span<const uint8_t> bytes,
                                      const MutablePagedKvView& out,
                                      std::vector<uint8_t>* keep_mask = nullptr) = 0;
  // The header of the frame being decoded (valid after Start or Decode).
  virtual const FrameInfo& info() const = 0;
};

// Parses the header and walks the chunk table of `frame`, verifying
// checksums, without decoding values. Memory: the FrameInfo's chunk table
// (about 40 bytes per record present) and a bit per record; a header
// declaring more records than the frame's bytes can hold is Corruption
// before anything is allocated for them.
Result<FrameInfo> InspectFrame(std::span<const uint8_t> frame);

// The size of the frame `profile` writes for a cache of `shape` and
// `dtype`, from the chunk plan alone (no KV values needed): the header, the
// record headers and checksums, body and segment headers, transform side
// bytes and quantizer params are exact (`fixed_bytes`); so are the packed
// codes and the raw region's bytes that the codec then codes. With the
// pack codec that is the whole frame (`exact`); an entropy codec (rans,
// zstd, lz4) turns code_bytes + raw_bytes into a data-dependent number of
// bytes (rans at most one byte per segment more). This is the size the
// controller decides with for a request's shape (a profile whose raw
// residual covers a short prompt sends more than raw, whatever its CR at
// long prompts). InvalidArgument for a shape outside the format's limits or
// a profile that cannot encode it (mixhq and duo need `head_scores`).
struct FrameSizePlan {
  uint64_t fixed_bytes = 0;
  uint64_t code_bytes = 0;  // quantised codes, bit-packed: ceil(count * bits / 8) per segment
  uint64_t raw_bytes = 0;   // the raw region's source bytes
  bool exact = false;       // the codec stores packed bytes as they are (pack)
  uint64_t total_bytes() const { return fixed_bytes + code_bytes + raw_bytes; }
};
Result<FrameSizePlan> PlanFrameSize(const Profile& profile, const KvShape& shape, DType dtype,
                                    const HeadScores* head_scores = nullptr);

// Decodes a complete frame into a newly allocated cache (what `kvserve
// decompress` does). The output is allocated only after every record has
// been located and checksummed (InspectFrame), so a header declaring a huge
// cache with too few records behind it costs only the input; and only when
// its logical size is at most `max_output_bytes` (ResourceExhausted
// otherwise: a frame of a few kilobytes may legitimately decode to
// gigabytes, e.g. constant KV under rANS, so the caller sets the budget).
// `info` and `keep_mask` (see DecoderContext::Decode) may be null.
Result<KvCache> DecodeFrame(std::span<const uint8_t> frame, uint64_t max_output_bytes,
                            const DecodeOptions& options = {}, FrameInfo* info = nullptr,
                            std::vector<uint8_t>* keep_mask = nullptr);

}  // namespace kvserve

#endif  // KVSERVE_CODEC_H_
