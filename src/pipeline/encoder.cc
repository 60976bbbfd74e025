// EncoderContext: plans the chunk records of a frame and encodes them on a
// thread pool, appending them to the sink in plan order so the bytes never
// depend on scheduling.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

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
using pipeline::Stages;

class EncoderContextImpl final : public EncoderContext {
 public:
  EncoderContextImpl(const Profile& profile, const EncodeOptions& options)
      : profile_(profile), options_(options) {
    if (options.threads > 1) own_pool_ = std::make_unique<ThreadPool>(options.threads);
  }

  Status Init() {
    KVSERVE_ASSIGN_OR_RETURN(stages_.transform, pipeline::CreateTransform(profile_));
    KVSERVE_ASSIGN_OR_RETURN(stages_.codec, pipeline::CreateCodec(profile_));
    return Status::Ok();
  }

  Status Encode(const KvView& kv, ByteSink& sink) override { return EncodeWhole(kv, sink); }
  Status Encode(const PagedKvView& kv, ByteSink& sink) override { return EncodeWhole(kv, sink); }

  Status Begin(const KvShape& shape, DType dtype, ByteSink& sink) override {
    active_ = false;
    if (shape.layers <= 0 || shape.kv_heads <= 0 || shape.tokens <= 0 || shape.head_dim <= 0)
      return Status::InvalidArgument("KV shape must be positive in every axis");
    if (static_cast<uint32_t>(shape.layers) > pipeline::kMaxLayers ||
        static_cast<uint32_t>(shape.kv_heads) > pipeline::kMaxKvHeads ||
        static_cast<uint32_t>(shape.tokens) > pipeline::kMaxTokens ||
        static_cast<uint32_t>(shape.head_dim) > pipeline::kMaxHeadDim)
      return Status::InvalidArgument("KV shape exceeds the frame format's limits");
    KVSERVE_ASSIGN_OR_RETURN(stages_.quantizer, pipeline::CreateQuantizerForEncode(
                                                    profile_, shape, options_.head_scores));
    shape_ = shape;
    dtype_ = dtype;
    sink_ = &sink;
    stats_ = FrameStats{};
    const int chunk = static_cast<int>(profile_.Get(ParamId::kChunkTokens));
    const int coded = std::clamp(stages_.quantizer->CodedTokens(shape.tokens), 0, shape.tokens);
    slots_ = pipeline::PlanChunks(shape, chunk, coded);
    per_layer_ = slots_.size() / shape.layers;
    layer_done_.assign(shape.layers, false);

    pipeline::FrameHeader header;
    header.dtype = dtype;
    header.shape = shape;
    header.chunk_tokens = static_cast<uint32_t>(chunk);
    header.coded_tokens = static_cast<uint32_t>(coded);
    header.record_count = static_cast<uint32_t>(slots_.size());
    header.profile_spec = profile_.ToString();
    pipeline::ByteWriter state(&header.state);
    stages_.quantizer->SerializeState(state);
    std::vector<uint8_t> bytes;
    pipeline::WriteFrameHeader(header, &bytes);
    stats_.header_bytes = bytes.size();
    stats_.total_bytes = bytes.size();
    KVSERVE_RETURN_IF_ERROR(sink.Append(bytes));
    active_ = true;
    return Status::Ok();
  }

  Status EncodeLayer(int layer, const KvView& kv) override { return EncodeOneLayer(layer, kv); }
  Status EncodeLayer(int layer, const PagedKvView& kv) override {
    return EncodeOneLayer(layer, kv);
  }

  Status Finish() override {
    if (!active_) return Status::InvalidArgument("Finish called before Begin");
    active_ = false;
    for (int l = 0; l < shape_.layers; ++l)
      if (!layer_done_[l])
        return Status::InvalidArgument("Finish: layer " + std::to_string(l) + " was not encoded");
    return Status::Ok();
  }

  const FrameStats& stats() const override { return stats_; }
  const Profile& profile() const override { return profile_; }

 private:
  ThreadPool& pool() { return own_pool_ ? *own_pool_ : ThreadPool::Shared(); }

  Status EncodeWhole(const pipeline::KvSource& kv, ByteSink& sink) {
    KVSERVE_RETURN_IF_ERROR(kv.Validate());
    KVSERVE_RETURN_IF_ERROR(Begin(kv.shape(), kv.dtype(), sink));
    KVSERVE_RETURN_IF_ERROR(EncodeSlots(kv, 0, slots_.size()));
    std::fill(layer_done_.begin(), layer_done_.end(), true);
    return Finish();
  }

  Status EncodeOneLayer(int layer, const pipeline::KvSource& kv) {
    if (!active_) return Status::InvalidArgument("EncodeLayer called before Begin");
    if (layer < 0 || layer >= shape_.layers)
      return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range");
    if (!(kv.shape() == shape_) || kv.dtype() != dtype_)
      return Status::InvalidArgument("EncodeLayer view does not match the shape given to Begin");
    KVSERVE_RETURN_IF_ERROR(kv.Validate());
    if (layer_done_[layer])
      return Status::InvalidArgument("layer " + std::to_string(layer) + " encoded twice");
    KVSERVE_RETURN_IF_ERROR(EncodeSlots(kv, layer * per_layer_, (layer + 1) * per_layer_));
    layer_done_[layer] = true;
    return Status::Ok();
  }

  // Encodes slots [begin, end) in parallel and appends them in order. A
  // worker that finishes a record appends every record that is complete
  // and next in order (if no other worker is appending), so the copy into
  // the sink overlaps encoding and reads records while they are still in
  // cache; the caller appends whatever is left. Nothing at or after a
  // failed record is appended.
  Status EncodeSlots(const pipeline::KvSource& kv, size_t begin, size_t end) {
    const size_t n = end - begin;
    outputs_.resize(n);
    std::vector<FrameStats> stats(n);
    std::vector<Status> status(n);
    std::unique_ptr<std::atomic<uint8_t>[]> state(new std::atomic<uint8_t>[n]);
    for (size_t i = 0; i < n; ++i) state[i].store(kPending, std::memory_order_relaxed);
    std::mutex append_mu;
    size_t next_append = 0;  // guarded by append_mu
    Status sink_status;      // guarded by append_mu
    auto flush = [&]() {
      while (next_append < n && sink_status.ok() &&
             state[next_append].load(std::memory_order_acquire) == kDone) {
        const size_t i = next_append++;
        sink_status = sink_->Append(outputs_[i]);
        if (!sink_status.ok()) break;
        stats_.record_header_bytes += stats[i].record_header_bytes;
        stats_.transform_bytes += stats[i].transform_bytes;
        stats_.param_bytes += stats[i].param_bytes;
        stats_.code_bytes += stats[i].code_bytes;
        stats_.raw_bytes += stats[i].raw_bytes;
        stats_.chunks += stats[i].chunks;
        stats_.total_bytes += outputs_[i].size();
      }
    };
    auto work = [&](size_t i) {
      thread_local ChunkScratch scratch;
      outputs_[i].clear();
      status[i] = pipeline::EncodeChunk(stages_, kv, slots_[begin + i], scratch, &outputs_[i],
                                        &stats[i]);
      state[i].store(status[i].ok() ? kDone : kFailed, std::memory_order_release);
      if (append_mu.try_lock()) {
        flush();
        append_mu.unlock();
      }
    };
    if (options_.threads == 1) {
      for (size_t i = 0; i < n; ++i) work(i);
    } else {
      pool().ParallelFor(n, work);
    }
    for (size_t i = 0; i < n; ++i) {
      if (!status[i].ok()) {
        active_ = false;
        return status[i];
      }
    }
    std::lock_guard<std::mutex> lock(append_mu);
    flush();
    return sink_status;
  }

  static constexpr uint8_t kPending = 0, kDone = 1, kFailed = 2;

  Profile profile_;
  EncodeOptions options_;
  std::unique_ptr<ThreadPool> own_pool_;
  Stages stages_;
  KvShape shape_;
  DType dtype_ = DType::kF32;
  ByteSink* sink_ = nullptr;
  FrameStats stats_;
  std::vector<ChunkSlot> slots_;
  size_t per_layer_ = 0;
  std::vector<bool> layer_done_;
  std::vector<std::vector<uint8_t>> outputs_;
  bool active_ = false;
};

}  // namespace

Result<std::unique_ptr<EncoderContext>> EncoderContext::Create(const Profile& profile,
                                                               const EncodeOptions& options) {
  KVSERVE_RETURN_IF_ERROR(profile.Validate());
  if (options.threads < 0) return Status::InvalidArgument("threads must be >= 0");
  auto ctx = std::make_unique<EncoderContextImpl>(profile, options);
  KVSERVE_RETURN_IF_ERROR(ctx->Init());
  return std::unique_ptr<EncoderContext>(std::move(ctx));
}

}  // namespace kvserve
