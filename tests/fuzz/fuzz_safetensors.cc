// libFuzzer target for safetensors images (src/io/safetensors.h): the
// header JSON, tensor entries and data offsets. Whatever validates can be
// listed and every tensor found, with its data inside the image.
#include <cstddef>
#include <cstdint>
#include <span>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto file = SafetensorsFile::FromBuffer(bytes, "fuzz");
  if (!file.ok()) return 0;
  for (const auto& name : (*file)->Names()) {
    auto t = (*file)->Find(name);
    if (!t.ok()) __builtin_trap();
    if (!t->data.empty() && (t->data.data() < bytes.data() ||
                             t->data.data() + t->data.size() > bytes.data() + bytes.size()))
      __builtin_trap();
  }
  return 0;
}
