// Copyright kvserve authors. libFuzzer target for the segment codecs (pack,
// rans, zstd, lz4).
//
// Input layout: byte 0 -> levels = 2 + byte % 255; bytes 1-2 (LE) -> count
// of symbols to decode (0..65535); byte 3 -> codec parameters (rans
// table_bits = 8 + byte % 8, zstd level = 1 + byte % 19, lz4 acceleration =
// 1 + byte % 64); the rest is the payload.
//
// For every codec it (1) decodes the payload as an untrusted segment of
// `count` symbols: a success must yield symbols < levels, and re-encoding
// them must round-trip; (2) treats the payload as symbols (byte % levels),
// encodes it twice (bytes must match: determinism), decodes and compares.
// Any violation aborts. Out-of-bounds accesses are caught by ASan.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "codecs/lz4_codec.h"
#include "codecs/pack.h"
#include "codecs/rans.h"
#include "codecs/zstd_codec.h"

namespace {

using kvserve::codecs::Lz4Codec;
using kvserve::codecs::PackCodec;
using kvserve::codecs::PackImpl;
using kvserve::codecs::RansCodec;
using kvserve::codecs::ZstdCodec;
using kvserve::pipeline::Codec;
using kvserve::pipeline::CodeSegment;

[[noreturn]] void Fail(const char* what, int codec) {
  std::fprintf(stderr, "fuzz_rans: %s (codec %d)\n", what, codec);
  std::abort();
}

void RoundTrip(const Codec& codec, int index, const CodeSegment& seg) {
  std::vector<uint8_t> a, b;
  if (!codec.Encode(seg, &a).ok() || !codec.Encode(seg, &b).ok()) Fail("encode failed", index);
  if (a != b) Fail("encode not deterministic", index);
  std::vector<uint8_t> back(seg.symbols.size());
  if (!codec.Decode(a, seg.levels, back.size(), back.data()).ok()) Fail("decode failed", index);
  if (back != seg.symbols) Fail("round trip mismatch", index);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const auto levels = static_cast<uint16_t>(2 + data[0] % 255);
  const size_t count = data[1] | static_cast<size_t>(data[2]) << 8;
  const uint8_t param = data[3];
  const std::span<const uint8_t> payload(data + 4, size - 4);

  const std::unique_ptr<Codec> codecs[] = {
      std::make_unique<PackCodec>(PackImpl::kScalar),
      std::make_unique<PackCodec>(PackImpl::kBest),
      std::make_unique<RansCodec>(8 + param % 8),
      std::make_unique<ZstdCodec>(1 + param % 19),
      std::make_unique<Lz4Codec>(1 + param % 64),
  };
  CodeSegment as_symbols;
  as_symbols.levels = levels;
  as_symbols.symbols.assign(payload.begin(), payload.end());
  for (auto& s : as_symbols.symbols) s = static_cast<uint8_t>(s % levels);

  for (int i = 0; i < static_cast<int>(std::size(codecs)); ++i) {
    const Codec& codec = *codecs[i];
    // (1) Untrusted decode.
    std::vector<uint8_t> out(count);
    if (codec.Decode(payload, levels, count, out.data()).ok()) {
      for (uint8_t s : out) {
        if (s >= levels) Fail("decoded symbol >= levels", i);
      }
      CodeSegment decoded{levels, out};
      RoundTrip(codec, i, decoded);
    }
    // (2) Round trip of the payload as symbols.
    RoundTrip(codec, i, as_symbols);
  }
  return 0;
}
