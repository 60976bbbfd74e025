// Copyright kvserve authors. The H200 benchmark behind `kvserve bench
// --device cuda` and kvserve_cuda_bench: encode/decode throughput of every
// GPU preset (plus variants that isolate a stage) on a synthetic
// Llama-3.1-8B-shaped cache, with a device-to-device copy as the yardstick.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "cuda/plan.h"
#include "experiments/cuda_bench.h"
#include "pipeline/stages.h"
#include "kvserve/codec.h"
#include "kvserve/cuda.h"
#include "kvserve/kv_file.h"

namespace kvserve::cuda {
namespace {

// Counter-based normal variates (splitmix64 + Box-Muller): the same cache on
// every run, generated on the GPU so 32K-token caches cost no host time.
KV_DEV uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
KV_DEV float Normal(uint64_t key) {
  const uint64_t r = Mix(key);
  const float u1 = (static_cast<float>(r >> 40) + 1.0f) * (1.0f / 16777217.0f);
  const float u2 = static_cast<float>((r >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

// One thread per (layer, kind, head, channel): per-channel offset and scale
// (outlier channels, stronger for keys), AR(1) along tokens (keys 0.9,
// values 0.6), bf16 [layer][kind][head][token][dim].
__global__ void SynthKernel(uint16_t* out, int layers, int heads, int tokens, int dim) {
  const int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t channels = static_cast<int64_t>(layers) * 2 * heads * dim;
  if (ch >= channels) return;
  const int d = static_cast<int>(ch % dim);
  const int64_t slab = ch / dim;  // (layer, kind, head)
  const int kind = static_cast<int>((slab / heads) % 2);
  const uint64_t key = Mix(static_cast<uint64_t>(ch) * 7919u + 17u);
  const bool outlier = (key % 1000) < (kind == 0 ? 40u : 20u);
  const float scale = (outlier ? (kind == 0 ? 12.0f : 3.0f) : 1.0f) * (kind == 0 ? 1.5f : 0.6f);
  const float mean = kind == 0 ? 0.8f * Normal(key ^ 0x55) : 0.0f;
  const float rho = kind == 0 ? 0.9f : 0.6f;
  const float innov = sqrtf(1.0f - rho * rho);
  float x = Normal(key);
  uint16_t* p = out + slab * static_cast<int64_t>(tokens) * dim + d;
  for (int t = 0; t < tokens; ++t) {
    x = rho * x + innov * Normal(key + 0x1000003ull * (t + 1));
    p[static_cast<int64_t>(t) * dim] = FloatToBF16Bits(mean + scale * x);
  }
}

struct Buffer {
  uint8_t* ptr = nullptr;
  explicit Buffer(size_t n) {
    if (cudaMalloc(&ptr, n == 0 ? 1 : n) != cudaSuccess) ptr = nullptr;
  }
  ~Buffer() { cudaFree(ptr); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Median microseconds of `fn` (which enqueues on `stream`) over `repeats`.
template <typename Fn>
Result<double> TimeUs(Fn fn, int repeats, cudaStream_t stream) {
  cudaEvent_t a, b;
  (void)cudaEventCreate(&a);
  (void)cudaEventCreate(&b);
  std::vector<double> us;
  for (int i = 0; i < repeats; ++i) {
    (void)cudaEventRecord(a, stream);
    const Status st = fn();
    (void)cudaEventRecord(b, stream);
    if (!st.ok()) return st;
    (void)cudaEventSynchronize(b);
    float ms = 0;
    (void)cudaEventElapsedTime(&ms, a, b);
    us.push_back(1000.0 * ms);
  }
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  return Median(us);
}

// Per-stage medians of `fn` (one Encode or Decode) with stage events on.
class StageTimer {
 public:
  StageTimer() {
    for (auto& e : events_.events) (void)cudaEventCreate(&e);
  }
  ~StageTimer() {
    for (auto& e : events_.events) (void)cudaEventDestroy(e);
  }
  StageEvents* events() { return &events_; }
  // Runs fn `repeats` times; returns (stage name, median us) in order.
  template <typename Fn>
  Result<std::vector<std::pair<std::string, double>>> Run(Fn fn, int repeats, cudaStream_t stream) {
    std::vector<std::string> names;
    std::vector<std::vector<double>> us;
    for (int i = 0; i < repeats; ++i) {
      events_.used = 0;
      KVSERVE_RETURN_IF_ERROR(fn());
      (void)cudaStreamSynchronize(stream);
      for (int k = 0; k + 1 < events_.used; ++k) {
        float ms = 0;
        (void)cudaEventElapsedTime(&ms, events_.events[k], events_.events[k + 1]);
        if (i == 0) {
          names.emplace_back(events_.names[k]);
          us.emplace_back();
        }
        if (static_cast<size_t>(k) < us.size()) us[k].push_back(1000.0 * ms);
      }
    }
    std::vector<std::pair<std::string, double>> out;
    for (size_t k = 0; k < names.size(); ++k) out.emplace_back(names[k], Median(us[k]));
    return out;
  }

 private:
  StageEvents events_;
};

std::vector<std::string> DefaultSpecs() {
  std::vector<std::string> specs;
  for (const Preset& p : Presets()) {
    auto profile = Profile::Parse(p.spec);
    if (profile.ok() && CheckSupported(*profile, KvShape{1, 1, 1, 128}).ok()) specs.emplace_back(p.name);
  }
  // Variants that isolate a stage against kivi-2 / kvserve-h2r.
  specs.emplace_back("hadamard+kivi(k=2,v=2,residual=128)+pack");
  specs.emplace_back("identity+kivi(k=2,v=2,residual=128)+rans");
  specs.emplace_back("identity+uniform(k=2,v=2,axis_k=token)+pack");
  return specs;
}

Status WriteFile(const std::string& path, const void* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Status::IOError("cannot write " + path);
  const size_t w = std::fwrite(data, 1, n, f);
  std::fclose(f);
  return w == n ? Status::Ok() : Status::IOError("short write to " + path);
}

// The rANS input symbols of `spec` for the cache `kv`: every segment's
// symbols back to back, and a little-endian u32 per segment with its count.
Status DumpSymbols(const Profile& profile, const KvView& kv, const HeadScores& scores, const std::string& path,
                   cudaStream_t stream) {
  KVSERVE_ASSIGN_OR_RETURN(auto quantizer, pipeline::CreateQuantizerForEncode(profile, kv.shape, &scores));
  std::vector<uint8_t> state;
  pipeline::ByteWriter writer(&state);
  quantizer->SerializeState(writer);
  KVSERVE_ASSIGN_OR_RETURN(Plan plan, BuildPlan(profile, kv.shape, kv.dtype, state, /*for_decode=*/false));
  KVSERVE_ASSIGN_OR_RETURN(auto enc, Encoder::Create(profile, kv.shape, kv.dtype, &scores));
  Buffer ws(enc->WorkspaceBytes()), frame(enc->MaxFrameBytes());
  if (ws.ptr == nullptr || frame.ptr == nullptr) return Status::ResourceExhausted("cudaMalloc dump");
  KVSERVE_RETURN_IF_ERROR(enc->Encode(kv, ws.ptr, frame.ptr, nullptr, stream));
  KVSERVE_RETURN_IF_ERROR(enc->Check(ws.ptr, stream));
  std::vector<uint8_t> symbols(plan.total_symbols);
  std::vector<uint32_t> sizes;
  uint64_t at = 0;
  for (const SegmentDesc& seg : plan.segments) {
    (void)cudaMemcpy(symbols.data() + at, ws.ptr + plan.ws.symbols + seg.sym_ws, seg.count, cudaMemcpyDeviceToHost);
    at += seg.count;
    sizes.push_back(static_cast<uint32_t>(seg.count));
  }
  KVSERVE_RETURN_IF_ERROR(WriteFile(path, symbols.data(), symbols.size()));
  return WriteFile(path + ".sizes", sizes.data(), 4 * sizes.size());
}

uint64_t RansSymbols(const Profile& profile, const KvShape& shape, DType dtype, const HeadScores& scores) {
  auto quantizer = pipeline::CreateQuantizerForEncode(profile, shape, &scores);
  if (!quantizer.ok()) return 0;
  std::vector<uint8_t> state;
  pipeline::ByteWriter writer(&state);
  (*quantizer)->SerializeState(writer);
  auto plan = BuildPlan(profile, shape, dtype, state, false);
  return plan.ok() ? plan->total_symbols : 0;
}

void AddRoofline(BenchRow& row, double copy_tbps) {
  row.traffic_bytes = static_cast<double>(row.input_bytes) + static_cast<double>(row.frame_bytes);
  row.encode_tbps = row.traffic_bytes / (row.encode_us * 1e6);
  row.decode_tbps = row.traffic_bytes / (row.decode_us * 1e6);
  row.encode_of_copy = copy_tbps > 0 ? row.encode_tbps / copy_tbps : 0;
  row.decode_of_copy = copy_tbps > 0 ? row.decode_tbps / copy_tbps : 0;
}

}  // namespace

Result<std::vector<BenchRow>> RunBench(const BenchOptions& options) {
  if (!Available()) return Status::NotSupported("no CUDA device");
  std::vector<BenchRow> rows;
  const std::vector<std::string> specs = options.presets.empty() ? DefaultSpecs() : options.presets;
  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) return Status::Internal("cudaStreamCreate");
  for (int tokens : options.tokens) {
    const KvShape shape{options.layers, options.kv_heads, tokens, options.head_dim};
    const uint64_t input_bytes = static_cast<uint64_t>(shape.NumElements()) * 2;
    Buffer input(input_bytes), copy(input_bytes);
    if (input.ptr == nullptr || copy.ptr == nullptr) return Status::ResourceExhausted("cudaMalloc input");
    const int64_t channels = static_cast<int64_t>(shape.layers) * 2 * shape.kv_heads * shape.head_dim;
    KV_LAUNCH(SynthKernel, static_cast<unsigned>((channels + 127) / 128), 128, 0, stream)(
        reinterpret_cast<uint16_t*>(input.ptr), shape.layers, shape.kv_heads, tokens, shape.head_dim);
    KVSERVE_RETURN_IF_ERROR(LaunchStatus("synth"));
    (void)cudaStreamSynchronize(stream);
    const KvView kv{input.ptr, DType::kBF16, shape, KvStrides::Contiguous(shape)};
    MutableKvView out{copy.ptr, DType::kBF16, shape, KvStrides::Contiguous(shape)};
    const HeadScores scores = SynthesizeHeadScores(shape.layers, shape.kv_heads, 1);
    if (tokens == options.dump_tokens && !options.dump_cache.empty()) {
      std::vector<uint8_t> host(input_bytes);
      (void)cudaMemcpy(host.data(), input.ptr, input_bytes, cudaMemcpyDeviceToHost);
      KVSERVE_RETURN_IF_ERROR(WriteFile(options.dump_cache, host.data(), host.size()));
    }
    if (tokens == options.dump_tokens && !options.dump_symbols.empty()) {
      KVSERVE_ASSIGN_OR_RETURN(Profile p, Profile::Parse(options.dump_profile));
      KVSERVE_RETURN_IF_ERROR(DumpSymbols(p, kv, scores, options.dump_symbols, stream));
    }

    double copy_tbps = 0;
    {  // Yardstick: device-to-device copy of the cache.
      BenchRow row;
      row.preset = "d2d-copy";
      row.stage = "cudaMemcpy";
      row.tokens = tokens;
      row.input_bytes = input_bytes;
      (void)cudaMemcpyAsync(copy.ptr, input.ptr, input_bytes, cudaMemcpyDeviceToDevice, stream);
      KVSERVE_ASSIGN_OR_RETURN(
          row.encode_us, TimeUs([&] {
            return cudaMemcpyAsync(copy.ptr, input.ptr, input_bytes, cudaMemcpyDeviceToDevice, stream) ==
                           cudaSuccess
                       ? Status::Ok()
                       : Status::Internal("memcpy");
          }, options.repeats, stream));
      row.decode_us = row.encode_us;
      row.encode_gbps = row.decode_gbps = input_bytes / (row.encode_us * 1e3);
      row.sp_gbps = row.encode_gbps / 2;
      row.ratio = 1;
      row.frame_bytes = input_bytes;
      AddRoofline(row, 0);
      copy_tbps = row.encode_tbps;
      row.encode_of_copy = row.decode_of_copy = 1;
      row.note = "GB/s = bytes copied / time; TB/s counts read + write";
      rows.push_back(row);
    }

    std::vector<uint8_t> host_input;
    if (options.verify_with_cpu && tokens == options.tokens.front()) {
      host_input.resize(input_bytes);
      (void)cudaMemcpy(host_input.data(), input.ptr, input_bytes, cudaMemcpyDeviceToHost);
    }
    for (const std::string& spec : specs) {
      BenchRow row;
      row.preset = spec;
      row.stage = "pipeline";
      row.tokens = tokens;
      row.input_bytes = input_bytes;
      std::vector<BenchRow> stage_rows;
      auto profile = Profile::Parse(spec);
      if (!profile.ok()) return profile.status();
      const uint64_t symbols = profile->codec() == CodecType::kRans
                                   ? RansSymbols(*profile, shape, DType::kBF16, scores)
                                   : 0;
      const Status st = [&]() -> Status {
        auto enc = Encoder::Create(*profile, shape, DType::kBF16, &scores);
        if (!enc.ok()) return enc.status();
        Buffer ws((*enc)->WorkspaceBytes()), frame((*enc)->MaxFrameBytes()), size(8);
        if (ws.ptr == nullptr || frame.ptr == nullptr) return Status::ResourceExhausted("cudaMalloc frame");
        auto encode = [&] {
          return (*enc)->Encode(kv, ws.ptr, frame.ptr, reinterpret_cast<uint64_t*>(size.ptr), stream);
        };
        // repeats 0: one call each way and no timing (for a profiler's run).
        const int warmups = options.repeats > 0 ? 2 : 1;
        for (int i = 0; i < warmups; ++i) KVSERVE_RETURN_IF_ERROR(encode());
        KVSERVE_RETURN_IF_ERROR((*enc)->Check(ws.ptr, stream));
        if (options.repeats > 0) {
          KVSERVE_ASSIGN_OR_RETURN(row.encode_us, TimeUs(encode, options.repeats, stream));
        }
        KVSERVE_RETURN_IF_ERROR((*enc)->Check(ws.ptr, stream));
        uint64_t frame_bytes = 0;
        (void)cudaMemcpy(&frame_bytes, size.ptr, 8, cudaMemcpyDeviceToHost);
        row.frame_bytes = frame_bytes;
        std::vector<uint8_t> header((*enc)->HeaderBytes());
        (void)cudaMemcpy(header.data(), frame.ptr, header.size(), cudaMemcpyDeviceToHost);
        auto dec = Decoder::Create(header);
        if (!dec.ok()) return dec.status();
        Buffer dws((*dec)->WorkspaceBytes());
        auto decode = [&] { return (*dec)->Decode(frame.ptr, frame_bytes, out, nullptr, dws.ptr, stream); };
        for (int i = 0; i < warmups; ++i) KVSERVE_RETURN_IF_ERROR(decode());
        KVSERVE_RETURN_IF_ERROR((*dec)->Check(dws.ptr, stream));
        if (options.repeats > 0) {
          KVSERVE_ASSIGN_OR_RETURN(row.decode_us, TimeUs(decode, options.repeats, stream));
        }
        KVSERVE_RETURN_IF_ERROR((*dec)->Check(dws.ptr, stream));
        if (options.stages && options.repeats > 0) {
          StageTimer timer;
          for (int direction = 0; direction < 2; ++direction) {
            if (direction == 0) {
              SetStageTiming(enc->get(), timer.events());
            } else {
              SetStageTiming(dec->get(), timer.events());
            }
            auto stages = direction == 0 ? timer.Run(encode, options.repeats, stream)
                                         : timer.Run(decode, options.repeats, stream);
            SetStageTiming(enc->get(), nullptr);
            SetStageTiming(dec->get(), nullptr);
            if (!stages.ok()) return stages.status();
            for (const auto& [name, us] : *stages) {
              BenchRow s;
              s.preset = spec;
              s.stage = name;
              s.direction = direction == 0 ? "encode" : "decode";
              s.tokens = tokens;
              s.input_bytes = input_bytes;
              s.frame_bytes = frame_bytes;
              s.encode_us = us;
              if (name == "rans") {
                s.stage_units = symbols;
                s.stage_gbps = us > 0 ? symbols / (us * 1e3) : 0;
                s.note = "GB/s of the stage's symbols (1 byte each)";
              }
              stage_rows.push_back(s);
            }
          }
          KVSERVE_RETURN_IF_ERROR((*enc)->Check(ws.ptr, stream));
          KVSERVE_RETURN_IF_ERROR((*dec)->Check(dws.ptr, stream));
        }
        row.encode_gbps = input_bytes / (row.encode_us * 1e3);
        row.decode_gbps = input_bytes / (row.decode_us * 1e3);
        row.sp_gbps = 1.0 / (1.0 / row.encode_gbps + 1.0 / row.decode_gbps);
        row.ratio = static_cast<double>(input_bytes) / frame_bytes;
        AddRoofline(row, copy_tbps);
        if (!host_input.empty()) {
          std::vector<uint8_t> gpu(frame_bytes), cpu;
          (void)cudaMemcpy(gpu.data(), frame.ptr, frame_bytes, cudaMemcpyDeviceToHost);
          EncodeOptions opt;
          opt.head_scores = &scores;
          auto cpu_enc = EncoderContext::Create(*profile, opt);
          VectorSink sink(&cpu);
          const KvView host_kv{host_input.data(), DType::kBF16, shape, KvStrides::Contiguous(shape)};
          const bool cpu_ok = cpu_enc.ok() && (*cpu_enc)->Encode(host_kv, sink).ok();
          row.ok = cpu_ok && cpu == gpu;
          row.note = row.ok ? "GPU frame == CPU frame" : "GPU frame != CPU frame";
        }
        return Status::Ok();
      }();
      if (!st.ok()) {
        row.ok = false;
        row.note = "error: " + st.ToString();
      }
      rows.push_back(row);
      rows.insert(rows.end(), stage_rows.begin(), stage_rows.end());
      std::fprintf(stderr, "%s T=%d enc %.1f us dec %.1f us\n", spec.c_str(), tokens, row.encode_us,
                   row.decode_us);
    }
  }
  (void)cudaStreamDestroy(stream);
  return rows;
}

std::string FormatBenchTable(const std::vector<BenchRow>& rows) {
  std::string s =
      "| profile | tokens | input MB | ratio | encode us | decode us | encode GB/s | decode GB/s | s_p GB/s | "
      "r+w MB | enc TB/s | enc % copy | dec TB/s | dec % copy | check |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  char line[768];
  for (const BenchRow& r : rows) {
    if (!r.direction.empty()) continue;
    std::snprintf(line, sizeof(line),
                  "| %s | %d | %.1f | %.2f | %.1f | %.1f | %.0f | %.0f | %.0f | %.1f | %.2f | %.0f%% | %.2f | %.0f%% | %s |\n",
                  r.preset.c_str(), r.tokens, r.input_bytes / 1e6, r.ratio, r.encode_us, r.decode_us,
                  r.encode_gbps, r.decode_gbps, r.sp_gbps, r.traffic_bytes / 1e6, r.encode_tbps,
                  100 * r.encode_of_copy, r.decode_tbps, 100 * r.decode_of_copy,
                  r.note.empty() ? (r.ok ? "ok" : "FAIL") : r.note.c_str());
    s += line;
  }
  bool any_stage = false;
  for (const BenchRow& r : rows) any_stage = any_stage || !r.direction.empty();
  if (!any_stage) return s;
  s += "\nStages (CUDA events between kernel groups of one call, median):\n\n"
       "| profile | tokens | direction | stage | us | GB/s | note |\n| --- | ---: | --- | --- | ---: | ---: | --- |\n";
  for (const BenchRow& r : rows) {
    if (r.direction.empty()) continue;
    char gbps[32] = "";
    if (r.stage_units > 0) std::snprintf(gbps, sizeof(gbps), "%.0f", r.stage_gbps);
    std::snprintf(line, sizeof(line), "| %s | %d | %s | %s | %.1f | %s | %s |\n", r.preset.c_str(), r.tokens,
                  r.direction.c_str(), r.stage.c_str(), r.encode_us, gbps, r.note.c_str());
    s += line;
  }
  return s;
}

}  // namespace kvserve::cuda
