// Copyright kvserve authors. libxxhash's XXH3 compiled for AVX2 (this file
// alone is built with -mavx2; checksum.cc calls it only on CPUs with AVX2).
#include "core/checksum.h"
#include "core/xxh3_ops.h"

#if defined(__AVX2__)
#include <immintrin.h>

#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

KVSERVE_DEFINE_XXH3_OPS(_mm256_zeroupper())

const kvserve::detail::Xxh3Ops* kvserve::detail::Xxh3Avx2Ops() { return &kOps; }
#else
const kvserve::detail::Xxh3Ops* kvserve::detail::Xxh3Avx2Ops() { return nullptr; }
#endif
