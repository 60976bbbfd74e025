// Copyright kvserve authors. Runtime CPU feature checks for the kernels
// that opt into AVX2/F16C per function. F16C is read from CPUID directly:
// clang (the fuzzing and sanitizer compiler) does not accept "f16c" in
// __builtin_cpu_supports.
#ifndef KVSERVE_CORE_CPU_FEATURES_H_
#define KVSERVE_CORE_CPU_FEATURES_H_

#include <cpuid.h>

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

}  // namespace kvserve

#endif  // KVSERVE_CORE_CPU_FEATURES_H_
