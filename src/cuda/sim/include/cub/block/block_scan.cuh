// Copyright kvserve authors. cub::BlockScan for the CUDA simulator: the
// exclusive sum through shared storage and two barriers.
#pragma once
#include "sim.h"
namespace cub {
template <typename T, int N>
struct BlockScan {
  struct TempStorage {
    T values[N];
  };
  TempStorage& storage;
  explicit BlockScan(TempStorage& s) : storage(s) {}
  void ExclusiveSum(T in, T& prefix, T& total) {
    const unsigned t = threadIdx.x;
    storage.values[t] = in;
    __syncthreads();
    prefix = 0;
    total = 0;
    for (unsigned i = 0; i < blockDim.x; ++i) {
      if (i < t) prefix += storage.values[i];
      total += storage.values[i];
    }
    __syncthreads();
  }
};
}  // namespace cub
