// Copyright kvserve authors. Helpers shared by the runtime's reference tests
// (PyTorch fixture and HF transformers reference): reading a named tensor of
// a safetensors file and the relative error of two logit vectors.
#ifndef KVSERVE_RUNTIME_REFERENCE_REFERENCE_UTIL_H_
#define KVSERVE_RUNTIME_REFERENCE_REFERENCE_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "io/safetensors.h"

namespace kvserve {

// The raw elements of tensor `name` of `file` reinterpreted as T (the
// caller knows the dtype); an empty vector plus a gtest failure when the
// tensor is missing.
template <typename T>
std::vector<T> ReadTensor(const SafetensorsFile& file, const char* name) {
  auto slice = file.Find(name);
  EXPECT_TRUE(slice.ok()) << slice.status().ToString();
  if (!slice.ok()) return {};
  std::vector<T> out(slice->data.size() / sizeof(T));
  std::memcpy(out.data(), slice->data.data(), slice->data.size());
  return out;
}

// ||got - want||_2 / ||want||_2 in double; infinity when the sizes differ.
inline double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += double(got[i] - want[i]) * (got[i] - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

}  // namespace kvserve

#endif  // KVSERVE_RUNTIME_REFERENCE_REFERENCE_UTIL_H_
