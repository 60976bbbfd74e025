// Copyright kvserve authors. BLAS wrappers (OpenBLAS through CBLAS).
#include "runtime/blas.h"

#include <cblas.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kvserve/timing.h"

namespace kvserve::runtime {

void MatMulTransB(int m, int n, int k, const float* a, int lda, const float* b, int ldb,
                  float* c, int ldc, bool accumulate, float alpha) {
  if (m == 1 && !accumulate && alpha == 1.0f) {
    // Decode: a matrix-vector product reads each weight once.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, b, ldb, a, 1, 0.0f, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, alpha, a, lda, b, ldb,
              accumulate ? 1.0f : 0.0f, c, ldc);
}

void MatMul(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
            int ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c,
              ldc);
}

double MeasureSgemmGflops(int n, int repeats) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  auto sgemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  sgemm();  // warms up threads and caches, untimed
  auto seconds = FastestSeconds(repeats, [&](int) { return sgemm(), Status::Ok(); });
  return 2.0 * n * n * double(n) / *seconds / 1e9;  // (the probe cannot fail)
}

std::string BlasDescription() {
  std::string s = openblas_get_config();
  s += " core=" + std::string(openblas_get_corename());
  s += " threads=" + std::to_string(openblas_get_num_threads());
  return s;
}

}  // namespace kvserve::runtime

namespace kvserve {
double MeasureSgemmGflops(int n, int repeats) { return runtime::MeasureSgemmGflops(n, repeats); }
std::string BlasDescription() { return runtime::BlasDescription(); }
void SetBlasThreads(int n) { openblas_set_num_threads(std::max(1, n)); }
}  // namespace kvserve
