// A program built against the installed kvserve package (find_package or
// pkg-config): every public header compiles on its own include path, the
// headers' version matches the linked library's, and a seeded random cache
// survives a lossless round trip byte for byte and a lossy one in shape.
// Exits 0 and prints "consumer ok" on success.
#include <kvserve/codec.h>
#include <kvserve/connector.h>
#include <kvserve/controller.h>
#include <kvserve/cuda.h>
#include <kvserve/kv.h>
#include <kvserve/kv_file.h>
#include <kvserve/paged.h>
#include <kvserve/pool.h>
#include <kvserve/profile.h>
#include <kvserve/profiler.h>
#include <kvserve/quality.h>
#include <kvserve/runtime.h>
#include <kvserve/serve.h>
#include <kvserve/status.h>
#include <kvserve/transport.h>
#include <kvserve/version.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

int Fail(const char* what, const kvserve::Status& status) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  if (kvserve::LibraryVersion() != KVSERVE_VERSION_NUMBER) {
    std::fprintf(stderr, "consumer: headers are %s, library is %s\n", KVSERVE_VERSION_STRING,
                 kvserve::LibraryVersionString());
    return 1;
  }
  if (kvserve::LibraryHasCuda() != (KVSERVE_HAVE_CUDA != 0)) {
    std::fprintf(stderr, "consumer: KVSERVE_HAVE_CUDA disagrees with the library\n");
    return 1;
  }
  const kvserve::KvShape shape{2, 2, 300, 64};
  kvserve::KvCache kv(kvserve::DType::kBF16, shape);
  std::mt19937 rng(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < kv.size_bytes() / 2; ++i) {
    const uint16_t v = kvserve::FloatToBFloat16(normal(rng));
    std::memcpy(kv.bytes() + 2 * i, &v, 2);
  }
  for (const char* spec : {"none", "kivi-2"}) {
    auto profile = kvserve::Profile::Parse(spec);
    if (!profile.ok()) return Fail(spec, profile.status());
    auto encoder = kvserve::EncoderContext::Create(*profile, {.threads = 1});
    if (!encoder.ok()) return Fail(spec, encoder.status());
    std::vector<uint8_t> frame;
    kvserve::VectorSink sink(&frame);
    if (auto s = (*encoder)->Encode(kv.view(), sink); !s.ok()) return Fail(spec, s);
    auto decoder = kvserve::DecoderContext::Create({.threads = 1});
    if (!decoder.ok()) return Fail(spec, decoder.status());
    kvserve::KvCache out(kv.dtype(), kv.shape());
    if (auto s = (*decoder)->Decode(frame, out.mutable_view()); !s.ok()) return Fail(spec, s);
    const bool lossless = std::strcmp(spec, "none") == 0;
    if (lossless && std::memcmp(out.bytes(), kv.bytes(), kv.size_bytes()) != 0) {
      std::fprintf(stderr, "consumer: %s round trip changed the cache\n", spec);
      return 1;
    }
    auto info = kvserve::InspectFrame(frame);
    if (!info.ok()) return Fail(spec, info.status());
    std::printf("%s: %zu bytes, %llu records\n", spec, frame.size(),
                static_cast<unsigned long long>(info->chunk_count));
  }
  std::printf("consumer ok (kvserve %s)\n", kvserve::LibraryVersionString());
  return 0;
}
