#pragma once
namespace cub { template <typename T, int N> struct BlockScan { struct TempStorage {}; BlockScan(TempStorage&) {} void ExclusiveSum(T in, T& prefix, T& total) { prefix = 0; total = in; } }; }
