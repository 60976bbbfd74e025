// libFuzzer target for the serve protocol's payloads (docs/e2e.md
// §Protocol; src/serve/serve_protocol.h): the first byte picks the decoder
// (request, response, generate, result, pool fetch, pool fetched), the
// rest is the payload. Decoding
// never crashes or trusts an unchecked length; whatever decodes re-encodes
// to something that decodes again.
#include <cstddef>
#include <cstdint>
#include <span>

#include "serve/serve_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  if (size < 1) return 0;
  const std::span<const uint8_t> payload(data + 1, size - 1);
  switch (data[0] % 6) {
    case 0:
      if (auto r = serve::DecodeRequest(payload); r.ok() && !serve::DecodeRequest(serve::EncodeRequest(*r)).ok())
        __builtin_trap();
      break;
    case 1:
      if (auto r = serve::DecodeResponse(payload); r.ok() && !serve::DecodeResponse(serve::EncodeResponse(*r)).ok())
        __builtin_trap();
      break;
    case 2:
      if (auto r = serve::DecodeGenerate(payload); r.ok() && !serve::DecodeGenerate(serve::EncodeGenerate(*r)).ok())
        __builtin_trap();
      break;
    case 3:
      if (auto r = serve::DecodeResult(payload); r.ok() && !serve::DecodeResult(serve::EncodeResult(*r)).ok())
        __builtin_trap();
      break;
    case 4:
      if (auto r = serve::DecodePoolFetch(payload);
          r.ok() && !serve::DecodePoolFetch(serve::EncodePoolFetch(*r)).ok())
        __builtin_trap();
      break;
    default:
      if (auto r = serve::DecodePoolFetched(payload);
          r.ok() && !serve::DecodePoolFetched(serve::EncodePoolFetched(*r)).ok())
        __builtin_trap();
  }
  return 0;
}
