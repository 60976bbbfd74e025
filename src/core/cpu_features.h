// Copyright kvserve authors. Runtime CPU feature checks for the kernels
// that opt into AVX2/F16C per function. F16C is read from CPUID directly:
// clang (the fuzzing and sanitizer compiler) does not accept "f16c" in
// __builtin_cpu_supports.
#ifndef KVSERVE_CORE_CPU_FEATURES_H_
#define KVSERVE_CORE_CPU_FEATURES_H_

#include <cpuid.h>
#include <immintrin.h>

#include <optional>

namespace kvserve {

// True when the CPU has both AVX2 and F16C.
inline bool CpuHasAvx2AndF16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_F16C)) return false;
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}

// Whether the upper halves of this thread's vector registers are in use
// (XINUSE's AVX bit, XGETBV(1)): code that ran 256-bit instructions and
// returned without vzeroupper leaves them so, and every SSE instruction the
// thread runs afterwards is slowed (4-5x on the CPU runtime's prefill).
// nullopt where the CPU cannot tell (no XGETBV(1)). For tests.
__attribute__((target("xsave"))) inline std::optional<bool> AvxUpperStateInUse() {
  static const bool can_tell = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_OSXSAVE)) return false;
    if (__get_cpuid_max(0, nullptr) < 0xD) return false;
    __cpuid_count(0xD, 1, eax, ebx, ecx, edx);
    return (eax & (1u << 2)) != 0;
  }();
  if (!can_tell) return std::nullopt;
  return ((_xgetbv(1) >> 2) & 1) != 0;
}

// Clears the upper halves of this thread's vector registers (vzeroupper).
// Call only where the CPU has AVX. For tests: a clean start, whatever ran
// before on the thread.
__attribute__((target("avx"))) inline void ClearAvxUpperState() { _mm256_zeroupper(); }

}  // namespace kvserve

#endif  // KVSERVE_CORE_CPU_FEATURES_H_
