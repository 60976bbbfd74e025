// Copyright kvserve authors. Runs the encode kernels of ../encode.cu on the
// CPU (256 std::threads per block, warp intrinsics emulated in include/sim.h,
// the host branches of the float helpers) and compares the frame with the CPU
// encoder's. A debugging aid for kernel logic when no GPU is at hand; not
// built by CMake. Build and run (from the repo root, after building the CPU
// libraries in build-cuda):
//   B=build-cuda/src; g++ -std=c++20 -O1 -DSIM_E=4 -DKVSERVE_SIM -Isrc/cuda/sim/include \
//     -Iinclude -Isrc src/cuda/sim/encode_sim.cc src/cuda/plan.cc -o /tmp/encode_sim \
//     $B/pipeline/libkvserve_pipeline.a $B/io/libkvserve_io.a $B/quantizers/libkvserve_quantizers.a \
//     $B/transforms/libkvserve_transforms.a $B/codecs/libkvserve_codecs.a $B/core/libkvserve_core.a \
//     -lxxhash -lzstd -llz4 -lfmt -lpthread
//   /tmp/encode_sim kivi-2 x 300 2      # spec, unused, tokens, kv_heads (head_dim = 32 * SIM_E)
#include "sim.h"
#include <thread>
#include <vector>
#include <random>
#include <cstdio>
#include <cmath>
#include "cuda/encode.cu"
#include "kvserve/codec.h"
#include "kvserve/kv_file.h"
#include "pipeline/stages.h"
using namespace kvserve;
using namespace kvserve::cuda;

template <class F> void RunBlock(int block, F f, int threads = 256) {
  SimBlock b;
  b.block = std::make_unique<std::barrier<>>(threads);
  for (auto& w : b.warp) w = std::make_unique<std::barrier<>>(32);
  g_block = &b;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] {
    threadIdx.x = t; blockIdx.x = block;
    f();
    b.warp[t >> 5]->arrive_and_drop();
    b.block->arrive_and_drop();
  });
  for (auto& t : ts) t.join();
}

int Main(int argc, char** argv, KvShape shape) {
  const char* spec = argc > 1 ? argv[1] : "kivi-2";
  KvCache c(DType::kF32, shape);
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0, 1);
  float* f = reinterpret_cast<float*>(c.bytes());
  for (int64_t i = 0; i < shape.NumElements(); ++i) f[i] = n(rng);
  auto p = *Profile::Parse(spec);
  HeadScores scores = SynthesizeHeadScores(shape.layers, shape.kv_heads, 3); EncodeOptions eo; eo.head_scores = &scores;
  auto enc = std::move(EncoderContext::Create(p, eo)).value();
  std::vector<uint8_t> out; VectorSink sink(&out);
  (void)enc->Encode(c.view(), sink);
  auto qz = std::move(pipeline::CreateQuantizerForEncode(p, shape, &scores)).value(); std::vector<uint8_t> state; pipeline::ByteWriter w(&state); qz->SerializeState(w);
  auto plan = *BuildPlan(p, shape, DType::kF32, state, false);
  std::vector<uint8_t> frame(plan.max_frame_bytes, 0xCD), ws(plan.ws.total + 64, 0xCD); memset(ws.data() + plan.ws.error, 0, 64);
  EncArgs a;
  a.c = plan.consts;
  a.t = DeviceTables{plan.records.data(), plan.runs.data(), plan.segments.data(), plan.tiles.data(), plan.raw_tiles.data(), plan.sign_words.data()};
  DeviceView v{};
  v.data = c.bytes() ? reinterpret_cast<uint8_t*>(c.bytes()) : nullptr;
  auto st = KvStrides::Contiguous(shape);
  v.layer = st.layer; v.kind = st.kind; v.head = st.head; v.token = st.token; v.dim = st.dim;
  v.dtype = 0; v.elem_bytes = 4; v.vec_ok = 1;
  a.src = v; a.ws = ws.data(); a.frame = frame.data(); a.L = plan.ws; a.direct = plan.direct ? 1 : 0;
  memcpy(frame.data(), plan.header.data(), plan.header.size());
  if (p.transform() == TransformType::kAffine) for (size_t r = 0; r < plan.records.size(); ++r) { int H = shape.kv_heads; RunBlock((int)r, [&] { blockIdx.y = 0; for (int h = 0; h < H; ++h) { blockIdx.y = h; if (threadIdx.x < (unsigned)shape.head_dim) AffineStatsKernel(a, 0); } }); }
  for (size_t ti = 0; ti < plan.tiles.size(); ++ti) RunBlock((int)ti, [&] { EncodeTilesKernel<SIM_E>(a, 0); });
  for (size_t ti = 0; ti < plan.raw_tiles.size(); ++ti) RunBlock((int)ti, [&] { RawTilesKernel<SIM_E>(a, 0); });
  if (!plan.direct) {  // rans: segments, then record offsets (the scan, on the host), then assembly
    a.direct = 0;
    for (size_t bi = 0; bi < (plan.segments.size() + 3) / 4; ++bi)
      RunBlock((int)bi, [&] { RansEncodeKernel(a, 0, plan.segments.size()); }, 128);
    const uint32_t* seg_len = reinterpret_cast<const uint32_t*>(ws.data() + plan.ws.seg_len);
    uint64_t* rec_off = reinterpret_cast<uint64_t*>(ws.data() + plan.ws.rec_off);
    uint64_t at = plan.header.size();
    for (size_t r = 0; r < plan.records.size(); ++r) {
      rec_off[r] = at;
      at += plan.records[r].static_bytes;
      for (int k = 0; k < plan.records[r].num_segments; ++k) at += seg_len[plan.records[r].first_segment + k];
    }
    frame.assign(at, 0xCD);
    memcpy(frame.data(), plan.header.data(), plan.header.size());
    a.frame = frame.data();
    printf("rans frame %zu bytes, cpu %zu\n", (size_t)at, out.size());
  }
  for (size_t bi = 0; bi < (plan.records.size() + 3) / 4; ++bi) RunBlock((int)bi, [&] { FinalizeKernel(a, 0, plan.records.size()); }, 128);
  printf("tiles done\n");
  for (size_t i = 0; i < out.size(); ++i) if (frame[i] != out[i]) { printf("frame diff at %zu of %zu\n", i, out.size()); break; }
  if (!plan.direct) { printf(frame == out ? "frames equal\n" : "frames differ\n"); return frame == out ? 0 : 1; }
  for (size_t r = 0; r < plan.records.size(); ++r) {
    auto& rec = plan.records[r]; if (rec.type != 1) continue;
    size_t o = rec.static_offset + 28 + rec.side_bytes;
    for (size_t i = 0; i < rec.params_bytes; ++i) if (frame[o+i] != out[o+i]) { printf("rec %zu params diff at %zu: sim %02x cpu %02x\n", r, i, frame[o+i], out[o+i]); break; }
  }
  printf("params checked\n");
  for (auto& s : plan.segments) { if (s.run < 0) continue;
    for (size_t i = 0; i < s.packed_bytes; ++i) if (frame[s.static_coded_offset+i] != out[s.static_coded_offset+i]) { printf("seg codes diff at %zu\n", i); return 1; } }
  printf("codes equal\n");
  return 0;
}

int main(int argc, char** argv) {
  int T = argc > 3 ? atoi(argv[3]) : 300; int H = argc > 4 ? atoi(argv[4]) : 2;
  return Main(argc, argv, KvShape{1, H, T, 32 * SIM_E});
}
