// Round-trip fuzzer: the input chooses a profile (from the presets), a small
// shape and dtype, and supplies the element bytes. Encoding must succeed on
// finite inputs, be deterministic (two encodes, identical bytes), decode
// without error, and reproduce lossless profiles bit for bit.
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"
#include "kvserve/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  if (size < 6) return 0;
  const auto presets = Presets();
  const Preset& preset = presets[data[0] % presets.size()];
  const DType dtype = static_cast<DType>(data[1] % 3);
  KvShape shape{1 + data[2] % 2, 1 + data[3] % 3, 1 + data[4] % 90, 8 << (data[5] % 3)};
  data += 6;
  size -= 6;
  KvCache kv(dtype, shape);
  // Fill from the input, cycling; replace non-finite values (caches are finite).
  const size_t es = DTypeSize(dtype);
  for (int64_t i = 0; i < shape.NumElements(); ++i) {
    std::byte* p = kv.bytes() + i * es;
    for (size_t b = 0; b < es; ++b)
      p[b] = size ? static_cast<std::byte>(data[(i * es + b) % size]) : std::byte{0};
    if (!std::isfinite(LoadAsFloat(p, dtype))) StoreFromFloat(0.5f, p, dtype);
  }
  auto profile = Profile::Parse(preset.spec);
  if (!profile.ok()) __builtin_trap();
  HeadScores scores;
  scores.layers = shape.layers;
  scores.kv_heads = shape.kv_heads;
  for (int i = 0; i < shape.layers * shape.kv_heads; ++i) scores.scores.push_back(float(i % 3));
  EncodeOptions options;
  options.threads = 1;
  options.head_scores = &scores;
  auto enc = EncoderContext::Create(*profile, options);
  if (!enc.ok()) __builtin_trap();
  std::vector<uint8_t> a, b;
  VectorSink sa(&a), sb(&b);
  Status encoded = (*enc)->Encode(kv.view(), sa);
  // Finite values beyond what a grid can represent (e.g. |x| > 65504 with
  // f16 scales) are refused with InvalidArgument; anything else is a bug.
  if (encoded.code() == StatusCode::kInvalidArgument) return 0;
  if (!encoded.ok()) {
    std::fprintf(stderr, "%s: %s\n", preset.name.data(), encoded.ToString().c_str());
    __builtin_trap();
  }
  if (!(*enc)->Encode(kv.view(), sb).ok() || a != b) __builtin_trap();
  auto dec = DecoderContext::Create(DecodeOptions{1});
  KvCache out(dtype, shape);
  if (!(*dec)->Decode(a, out.mutable_view()).ok()) __builtin_trap();
  if (profile->IsLossless() && std::memcmp(kv.bytes(), out.bytes(), kv.size_bytes()) != 0)
    __builtin_trap();
  return 0;
}
