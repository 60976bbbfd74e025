// libFuzzer target for KV files (docs/kv-files.md; ParseKvFile): a
// safetensors image with the kvserve-kv metadata and layers.{l}.key/value
// tensors. The cache it returns is never larger than the image.
#include <cstddef>
#include <cstdint>
#include <span>

#include "kvserve/kv_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  KvFileMetadata meta;
  auto kv = ParseKvFile(bytes, "fuzz", &meta);
  if (kv.ok() && kv->size_bytes() > size) __builtin_trap();
  return 0;
}
