// Copyright kvserve authors. The XXH3-64 entry points of one build of
// libxxhash's header (checksum.cc: the baseline instruction set;
// xxh3_avx2.cc: AVX2). Internal to src/core.
#ifndef KVSERVE_CORE_XXH3_OPS_H_
#define KVSERVE_CORE_XXH3_OPS_H_

#include <cstddef>
#include <cstdint>

namespace kvserve::detail {

// `state` points at Checksum64Stream::kStateBytes bytes aligned to 64.
struct Xxh3Ops {
  uint64_t (*hash)(const void* data, size_t size);
  void (*reset)(void* state);
  void (*update)(void* state, const void* data, size_t size);
  uint64_t (*digest)(const void* state);
};

// The AVX2 build; null where kvserve was built without it (not x86-64).
// Call only when the CPU has AVX2.
const Xxh3Ops* Xxh3Avx2Ops();

}  // namespace kvserve::detail

// Defines `const Xxh3Ops kOps` in an anonymous namespace from the XXH3
// functions in scope: the including file includes <xxhash.h> with
// XXH_INLINE_ALL first. `LEAVE` runs after each XXH3 call, before
// returning: the AVX2 build clears the upper halves of the vector registers
// there (GCC leaves XXH3's long-input loops without vzeroupper, and with the
// upper state in use every later SSE instruction of the thread pays a
// penalty: the CPU runtime's prefill ran 4-5x slower after one checksum).
#define KVSERVE_DEFINE_XXH3_OPS(LEAVE)                                                     \
  namespace {                                                                              \
  static_assert(sizeof(XXH3_state_t) <= ::kvserve::Checksum64Stream::kStateBytes &&         \
                alignof(XXH3_state_t) <= 64);                                              \
  uint64_t OpsHash(const void* data, size_t size) {                                         \
    const uint64_t h = XXH3_64bits(data, size);                                             \
    LEAVE;                                                                                  \
    return h;                                                                               \
  }                                                                                         \
  void OpsReset(void* state) {                                                              \
    XXH3_64bits_reset(static_cast<XXH3_state_t*>(state));                                   \
    LEAVE;                                                                                  \
  }                                                                                         \
  void OpsUpdate(void* state, const void* data, size_t size) {                              \
    XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, size);                      \
    LEAVE;                                                                                  \
  }                                                                                         \
  uint64_t OpsDigest(const void* state) {                                                   \
    const uint64_t h = XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));         \
    LEAVE;                                                                                  \
    return h;                                                                               \
  }                                                                                         \
  constexpr ::kvserve::detail::Xxh3Ops kOps{&OpsHash, &OpsReset, &OpsUpdate, &OpsDigest};   \
  }

#endif  // KVSERVE_CORE_XXH3_OPS_H_
