// libFuzzer target for every frame decoder entry point: DecoderContext::
// Decode, the streaming Start/DecodeRecord path and InspectFrame. Any input
// must yield OK or an error Status: never a crash, a hang, an out-of-bounds
// access (ASan) or an allocation beyond what the header's shape implies.
// Output buffers are allocated here from the header's shape only when that
// shape is small, so the fuzzer explores the decoder, not the allocator.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/codec.h"
#include "kvserve/kv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  std::span<const uint8_t> frame(data, size);
  auto info = InspectFrame(frame);
  auto dec = DecoderContext::Create(DecodeOptions{1});
  if (!dec.ok()) __builtin_trap();
  auto start = (*dec)->Start(frame);
  if (!start.ok()) return 0;
  const FrameInfo& header = (*dec)->info();
  if (header.shape.NumElements() > (1 << 22)) return 0;
  KvCache out(header.dtype, header.shape);
  std::vector<uint8_t> mask;
  (void)(*dec)->Decode(frame, out.mutable_view(), &mask);
  // Streaming: feed records one after another from after the header.
  auto dec2 = DecoderContext::Create(DecodeOptions{1});
  auto used = (*dec2)->Start(frame);
  if (!used.ok()) __builtin_trap();  // Start succeeded above on the same bytes
  size_t pos = *used;
  while (pos < frame.size()) {
    auto r = (*dec2)->DecodeRecord(frame.subspan(pos), out.mutable_view(), &mask);
    if (!r.ok()) break;
    pos += *r;
  }
  (void)info;
  return 0;
}
