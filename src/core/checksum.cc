// Copyright kvserve authors. Checksum64: libxxhash's XXH3 for the baseline
// instruction set here, the AVX2 build (xxh3_avx2.cc) where the CPU has it.
#include "core/checksum.h"

#include "core/xxh3_ops.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

KVSERVE_DEFINE_XXH3_OPS((void)0)

namespace kvserve {

namespace {

const detail::Xxh3Ops& Ops() {
  static const detail::Xxh3Ops* ops = [] {
#if defined(__x86_64__) || defined(__i386__)
    if (__builtin_cpu_supports("avx2") && detail::Xxh3Avx2Ops() != nullptr)
      return detail::Xxh3Avx2Ops();
#endif
    return &kOps;
  }();
  return *ops;
}

}  // namespace

uint64_t Checksum64(const void* data, size_t size) { return Ops().hash(data, size); }

Checksum64Stream::Checksum64Stream() { Ops().reset(state_); }

void Checksum64Stream::Update(const void* data, size_t size) {
  if (size > 0) Ops().update(state_, data, size);
}

uint64_t Checksum64Stream::Digest() const { return Ops().digest(state_); }

}  // namespace kvserve
