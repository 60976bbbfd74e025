// Copyright kvserve authors. Internal interfaces of the three pipeline
// stages (paper Fig. 7): Transform -> Quantizer -> Codec. The frame layer
// (src/pipeline/frame_*.cc) drives them chunk by chunk; they sit in core, below
// the stage areas (transforms, quantizers, codecs) and the pipeline that uses
// them, so that no area includes a header of an area above it. Not public.
//
// A chunk is one (layer, kind, token block). The frame layer splits the
// tokens of every (layer, kind) into a *coded* region [0, coded_tokens) that
// goes through Transform + Quantizer, and a *raw* region [coded_tokens,
// tokens) whose elements are stored as their exact source-dtype bytes (KIVI's
// full-precision recent window and ragged tail). Both regions are cut into
// blocks of at most `chunk` tokens; coded blocks start at multiples of `chunk`.
// Every byte any stage produces is deterministic for a given input and
// profile: no dependence on threads, time or memory addresses.
#ifndef KVSERVE_CORE_STAGES_H_
#define KVSERVE_CORE_STAGES_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"
#include "kvserve/status.h"

namespace kvserve::pipeline {

// Where a chunk sits in the cache. All counts are positive.
struct ChunkInfo {
  int layer = 0;
  int num_layers = 0;
  KvKind kind = KvKind::kKey;
  int kv_heads = 0;
  int head_dim = 0;
  int token_begin = 0;   // absolute index of the chunk's first token
  int tokens = 0;        // tokens in this chunk
  int total_tokens = 0;  // tokens in the whole cache
  DType source_dtype = DType::kF32;
};

// Dense fp32 working tensor of one chunk, layout [head][token][dim].
struct ChunkTensor {
  float* data = nullptr;
  int heads = 0;
  int tokens = 0;
  int dim = 0;
  size_t size() const { return static_cast<size_t>(heads) * tokens * dim; }
  float* row(int head, int token) const {
    return data + (static_cast<size_t>(head) * tokens + token) * dim;
  }
};

// Appends little-endian scalars to a byte vector.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  void PutU8(uint8_t v) { out_->push_back(v); }
  void PutU16(uint16_t v) { Put(&v, 2); }
  void PutU32(uint32_t v) { Put(&v, 4); }
  void PutU64(uint64_t v) { Put(&v, 8); }
  void PutF32(float v) { Put(&v, 4); }
  void PutBytes(const void* p, size_t n) { Put(p, n); }
  size_t size() const { return out_->size(); }

 private:
  // x86-64 and aarch64 are little-endian. resize + memcpy rather than
  // insert: this runs once per scale/zero point on the encode hot path.
  void Put(const void* p, size_t n) {
    if (n == 0) return;  // p may be null (an empty section); memcpy forbids that
    const size_t at = out_->size();
    out_->resize(at + n);
    std::memcpy(out_->data() + at, p, n);
  }
  std::vector<uint8_t>* out_;
};

// Reads little-endian scalars from untrusted bytes; every getter fails with
// Corruption instead of reading past the end.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
  Status GetU8(uint8_t* v) { return Get(v, 1); }
  Status GetU16(uint16_t* v) { return Get(v, 2); }
  Status GetU32(uint32_t* v) { return Get(v, 4); }
  Status GetU64(uint64_t* v) { return Get(v, 8); }
  Status GetF32(float* v) { return Get(v, 4); }
  Status GetBytes(void* p, size_t n) { return Get(p, n); }
  // A view of the next n bytes, consumed.
  Status GetSpan(size_t n, std::span<const uint8_t>* s) {
    if (n > remaining()) return Status::Corruption("truncated field");
    *s = in_.subspan(pos_, n);
    pos_ += n;
    return Status::Ok();
  }
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }
  bool done() const { return pos_ == in_.size(); }

 private:
  Status Get(void* p, size_t n) {
    if (n > remaining()) return Status::Corruption("truncated field");
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return Status::Ok();
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------- Transform
// An invertible map on a chunk's fp32 tensor. Forward may append side
// information (e.g. affine shift/scale) that Inverse needs; Inverse must
// reject malformed side bytes with Corruption and consume exactly what
// Forward wrote.
class Transform {
 public:
  virtual ~Transform() = default;
  virtual Status Forward(const ChunkInfo& info, const ChunkTensor& x,
                         ByteWriter& side) const = 0;
  virtual Status Inverse(const ChunkInfo& info, const ChunkTensor& x,
                         ByteReader& side) const = 0;

  // Row-local fast path (optional). Returns true when this transform maps
  // every (head, token) row of a chunk with rows of `head_dim` values on its
  // own and writes no side bytes, so the pipeline may stream a chunk through
  // TransformRows a few rows at a time instead of materialising it whole.
  virtual bool RowLocal(int head_dim) const { (void)head_dim; return false; }
  // Applies Forward (inverse == false) or Inverse to `count` consecutive
  // rows of `info.head_dim` floats of head `head` (the head index within the
  // chunk), in place. Only called when RowLocal(info.head_dim) is true; the
  // bits must equal those Forward / Inverse give the same rows of a whole
  // chunk.
  virtual void TransformRows(const ChunkInfo& info, int head, float* rows, int count,
                             bool inverse) const {
    (void)info, (void)head, (void)rows, (void)count, (void)inverse;
  }
};

// Supplies a chunk's fp32 rows (gathered and transformed) on demand: the
// streaming encoder's view of the source. Not thread-safe.
class RowSource {
 public:
  virtual ~RowSource() = default;
  // Writes rows [token, token + count) of head `head` (chunk-relative) as
  // dense [token][dim] floats into `out`.
  virtual void Read(int head, int token, int count, float* out) = 0;
};

// Receives a chunk's decoded fp32 rows and stores them (inverse transform,
// conversion to the output dtype): the streaming decoder's view of the
// destination. Not thread-safe.
class RowSink {
 public:
  virtual ~RowSink() = default;
  // Stores rows [token, token + count) of head `head` from the dense
  // [token][dim] floats `rows`, which the sink may overwrite.
  virtual void Write(int head, int token, int count, float* rows) = 0;
  // Stores rows [token, token + count) of head `head` as exact zeros (pruned
  // tokens, whatever the transform would do to them).
  virtual void WriteZeros(int head, int token, int count) = 0;
};

// ---------------------------------------------------------------- Quantizer
// A run of symbols that share one alphabet size; the codec codes each
// segment independently. 2 <= levels <= 256 and every symbol < levels.
struct CodeSegment {
  uint16_t levels = 256;
  std::vector<uint8_t> symbols;
};

// What Quantize writes for a chunk, known from the plan alone (no values):
// each segment's level count and symbol count, in order, and the params
// size. The frame-size plan (PlanFrameSize) is built from it.
struct ChunkLayout {
  struct Segment {
    uint16_t levels = 256;
    size_t symbols = 0;
  };
  std::vector<Segment> segments;
  size_t param_bytes = 0;
};

struct QuantizedChunk {
  std::vector<CodeSegment> segments;
  // Scales, zero points and any per-chunk layout the quantizer needs,
  // stored verbatim in the chunk record.
  std::vector<uint8_t> params;
  void Clear() { segments.clear(); params.clear(); }
};

class Quantizer {
 public:
  virtual ~Quantizer() = default;
  // Number of leading tokens of every (layer, kind) that are coded; the rest
  // are kept raw. Depends only on the profile and total_tokens.
  virtual int CodedTokens(int total_tokens) const = 0;
  // Quantizes `x` (already transformed) into `out`, replacing its contents
  // (implementations may reuse out's buffers). Deterministic.
  virtual Status Quantize(const ChunkInfo& info, const ChunkTensor& x,
                          QuantizedChunk* out) const = 0;
  // Reconstructs `x` from `in`, which came off the wire: any inconsistency
  // (segment count, levels, symbol counts, params size) is Corruption.
  // If keep_mask is non-null it points at heads*tokens bytes ([head][token])
  // and receives 0 for pruned tokens (whose values are set to 0) and 1 for
  // kept ones.
  virtual Status Dequantize(const ChunkInfo& info, const QuantizedChunk& in,
                            const ChunkTensor& x, uint8_t* keep_mask) const = 0;
  // Streaming forms of Quantize / Dequantize: the same bytes and values,
  // with the chunk's rows read from `rows` / written to `rows` a tile at a
  // time, so no fp32 copy of the whole chunk is made. Errors as for
  // Quantize / Dequantize; on a Dequantize error some rows may already have
  // been written. The defaults materialise the chunk and call the
  // non-streaming forms.
  virtual Status QuantizeRows(const ChunkInfo& info, RowSource& rows, QuantizedChunk* out) const;
  virtual Status DequantizeRows(const ChunkInfo& info, const QuantizedChunk& in, RowSink& rows,
                                uint8_t* keep_mask) const;
  // The segments and params size Quantize writes for a chunk of `info`
  // (InvalidArgument when the chunk does not match the quantizer's shape;
  // the default, for quantizers that code no chunk, NotSupported).
  virtual Status Layout(const ChunkInfo& info, ChunkLayout* layout) const {
    (void)info, (void)layout;
    return Status::NotSupported("this quantizer codes no chunk");
  }
  // Per-cache state the decoder needs that is not in the profile (e.g.
  // MixHQ's per-(layer, head) bit allocation), written once in the frame
  // header. Empty for most quantizers.
  virtual void SerializeState(ByteWriter& out) const { (void)out; }
};

inline Status Quantizer::QuantizeRows(const ChunkInfo& info, RowSource& rows,
                                      QuantizedChunk* out) const {
  thread_local std::vector<float> values;
  values.resize(static_cast<size_t>(info.kv_heads) * info.tokens * info.head_dim);
  ChunkTensor x{values.data(), info.kv_heads, info.tokens, info.head_dim};
  for (int h = 0; h < info.kv_heads; ++h) rows.Read(h, 0, info.tokens, x.row(h, 0));
  return Quantize(info, x, out);
}

inline Status Quantizer::DequantizeRows(const ChunkInfo& info, const QuantizedChunk& in,
                                        RowSink& rows, uint8_t* keep_mask) const {
  thread_local std::vector<float> values;
  thread_local std::vector<uint8_t> mask;
  values.resize(static_cast<size_t>(info.kv_heads) * info.tokens * info.head_dim);
  mask.assign(static_cast<size_t>(info.kv_heads) * info.tokens, 1);
  ChunkTensor x{values.data(), info.kv_heads, info.tokens, info.head_dim};
  KVSERVE_RETURN_IF_ERROR(Dequantize(info, in, x, mask.data()));
  for (int h = 0; h < info.kv_heads; ++h) {
    for (int t = 0; t < info.tokens; ++t) {
      if (mask[static_cast<size_t>(h) * info.tokens + t]) {
        rows.Write(h, t, 1, x.row(h, t));
      } else {
        rows.WriteZeros(h, t, 1);
      }
    }
  }
  if (keep_mask != nullptr) std::memcpy(keep_mask, mask.data(), mask.size());
  return Status::Ok();
}

// ------------------------------------------------------------------- Codec
// Codes one segment losslessly.
class Codec {
 public:
  virtual ~Codec() = default;
  // Appends the coded form of `segment` to `out`.
  virtual Status Encode(const CodeSegment& segment, std::vector<uint8_t>* out) const = 0;
  // Decodes exactly `count` symbols with alphabet `levels` from `in` into
  // out[0..count). `in` must be consumed exactly; anything else, or any
  // symbol >= levels, is Corruption. Never reads outside `in` / writes
  // outside out[0..count).
  virtual Status Decode(std::span<const uint8_t> in, uint16_t levels, size_t count,
                        uint8_t* out) const = 0;
  // True when Encode of a segment with `levels` appends exactly its symbols,
  // unchanged (and Decode accepts exactly those bytes): the pipeline then
  // copies raw records straight between the KV view and the record.
  virtual bool StoresVerbatim(uint16_t levels) const { (void)levels; return false; }
};

// Bits needed for symbols < levels (1 for levels == 2, 8 for 256).
inline int BitsForLevels(int levels) {
  int b = 1;
  while ((1 << b) < levels) ++b;
  return b;
}

// ---------------------------------------------------------------- factories
// Create the stage objects a profile names. The profile must be valid.
Result<std::unique_ptr<Transform>> CreateTransform(const Profile& profile);
// For encoding: `scores` may be null unless the quantizer needs head scores
// (mixhq, duo), in which case InvalidArgument names what is missing.
Result<std::unique_ptr<Quantizer>> CreateQuantizerForEncode(const Profile& profile,
                                                            const KvShape& shape,
                                                            const HeadScores* scores);
// For decoding: `state` holds exactly what SerializeState wrote.
Result<std::unique_ptr<Quantizer>> CreateQuantizerForDecode(const Profile& profile,
                                                            const KvShape& shape,
                                                            std::span<const uint8_t> state);
Result<std::unique_ptr<Codec>> CreateCodec(const Profile& profile);

}  // namespace kvserve::pipeline

#endif  // KVSERVE_CORE_STAGES_H_
