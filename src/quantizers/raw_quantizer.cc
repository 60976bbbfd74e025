// Copyright kvserve authors. "raw": nothing is coded; the frame layer keeps
// every token as exact source bytes.
#include "quantizers/quantizers.h"

namespace kvserve::quantizers {
namespace {

class RawQuantizer final : public pipeline::Quantizer {
 public:
  int CodedTokens(int total_tokens) const override { return 0; }
  // Internal for a non-empty chunk: the frame layer must not send any.
  Status Quantize(const pipeline::ChunkInfo& info, const pipeline::ChunkTensor& x,
                  pipeline::QuantizedChunk* out) const override {
    out->Clear();
    if (info.tokens != 0 || x.size() != 0) {
      return Status::Internal("raw quantizer asked to quantise a chunk");
    }
    return Status::Ok();
  }
  Status Dequantize(const pipeline::ChunkInfo& info, const pipeline::QuantizedChunk& in,
                    const pipeline::ChunkTensor& x, uint8_t* keep_mask) const override {
    if (info.tokens != 0 || x.size() != 0) {
      return Status::Internal("raw quantizer asked to dequantise a chunk");
    }
    if (!in.segments.empty() || !in.params.empty()) {
      return Status::Corruption("raw quantizer chunk carries quantised data");
    }
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<pipeline::Quantizer> NewRawQuantizer() { return std::make_unique<RawQuantizer>(); }

}  // namespace kvserve::quantizers
