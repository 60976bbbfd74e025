// Copyright kvserve authors. The BLAS entry points the runtime uses, and an
// sgemm throughput probe for benchmarks.
#ifndef KVSERVE_RUNTIME_BLAS_H_
#define KVSERVE_RUNTIME_BLAS_H_

#include <string>

namespace kvserve::runtime {

// c[m][n] = a[m][k] * b[n][k]^T (+ c[m][n] when accumulate). Row-major with
// leading dimensions lda, ldb, ldc (in floats). Uses BLAS threads.
void MatMulTransB(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                  float* c, int ldc, bool accumulate, float alpha = 1.0f);
// c[m][n] = a[m][k] * b[k][n]. Row-major.
void MatMul(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
            int ldc);
// Measured fp32 GEMM rate (GFLOP/s) of this BLAS on n x n x n products,
// best of `repeats` runs.
double MeasureSgemmGflops(int n, int repeats);
// "OpenBLAS 0.3.21 ... (N threads)".
std::string BlasDescription();

}  // namespace kvserve::runtime

#endif  // KVSERVE_RUNTIME_BLAS_H_
