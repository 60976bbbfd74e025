// Copyright kvserve authors. KV file round trips and malformed-file errors.
#include "io/kv_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "kvserve/kv_file.h"

namespace kvserve {
namespace {

class KvFileTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) {
    std::string p = ::testing::TempDir() + "kv_file_test_" + std::to_string(getpid()) + "_" + name;
    paths_.push_back(p);
    return p;
  }
  void TearDown() override {
    for (const auto& p : paths_) std::remove(p.c_str());
  }
  std::vector<std::string> paths_;
};

KvShape RandomShape(std::mt19937& rng) {
  std::uniform_int_distribution<int> layers(1, 4), heads(1, 3), tokens(1, 70), dim(1, 9);
  return KvShape{layers(rng), heads(rng), tokens(rng), dim(rng) * 2};
}

// A cache with random values, each element distinct enough to spot mix-ups.
KvCache RandomCache(std::mt19937& rng, DType dtype, const KvShape& shape) {
  KvCache c(dtype, shape);
  MutableKvView v = c.mutable_view();
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int l = 0; l < shape.layers; ++l)
    for (int k = 0; k < 2; ++k)
      for (int h = 0; h < shape.kv_heads; ++h)
        for (int t = 0; t < shape.tokens; ++t)
          for (int d = 0; d < shape.head_dim; ++d)
            StoreFromFloat(normal(rng), v.At(l, k, h, t, d), dtype);
  return c;
}

bool SameElements(const KvView& a, const KvView& b) {
  if (a.shape != b.shape || a.dtype != b.dtype) return false;
  const size_t es = DTypeSize(a.dtype);
  for (int l = 0; l < a.shape.layers; ++l)
    for (int k = 0; k < 2; ++k)
      for (int h = 0; h < a.shape.kv_heads; ++h)
        for (int t = 0; t < a.shape.tokens; ++t)
          for (int d = 0; d < a.shape.head_dim; ++d)
            if (std::memcmp(a.At(l, k, h, t, d), b.At(l, k, h, t, d), es) != 0) return false;
  return true;
}

TEST_F(KvFileTest, RoundTripsContiguousCachesOfEveryDType) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 12; ++trial) {
    const DType dtype = static_cast<DType>(trial % 3);
    const KvShape shape = RandomShape(rng);
    KvCache c = RandomCache(rng, dtype, shape);
    const std::string path = Path("contig" + std::to_string(trial));
    ASSERT_TRUE(SaveKvFile(path, c.view(), {{"model", "test"}}).ok());
    KvFileMetadata meta;
    auto loaded = LoadKvFile(path, &meta);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_TRUE(SameElements(c.view(), loaded->view()));
    ASSERT_EQ(loaded->size_bytes(), c.size_bytes());
    EXPECT_EQ(0, std::memcmp(loaded->bytes(), c.bytes(), c.size_bytes()));
    EXPECT_EQ(meta.at("format"), "kvserve-kv");
    EXPECT_EQ(meta.at("version"), "1");
    EXPECT_EQ(meta.at("synthetic"), "false");
    EXPECT_EQ(meta.at("model"), "test");
  }
}

// Views with an engine-style layout: token-major with K and V interleaved,
// and a layout with a non-unit dim stride.
TEST_F(KvFileTest, SavesStridedViews) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 8; ++trial) {
    const DType dtype = static_cast<DType>(trial % 3);
    const KvShape s = RandomShape(rng);
    KvCache dense = RandomCache(rng, dtype, s);
    // Layout [layer][token][kind][head][dim] (+ padding of 3 elements per token row).
    KvStrides st;
    st.dim = (trial % 2 == 0) ? 1 : 2;
    st.head = s.head_dim * st.dim;
    st.kind = st.head * s.kv_heads;
    st.token = st.kind * 2 + 3;
    st.layer = st.token * s.tokens;
    std::vector<std::byte> storage(static_cast<size_t>(st.layer) * s.layers * DTypeSize(dtype));
    MutableKvView strided{storage.data(), dtype, s, st};
    const KvView src = dense.view();
    for (int l = 0; l < s.layers; ++l)
      for (int k = 0; k < 2; ++k)
        for (int h = 0; h < s.kv_heads; ++h)
          for (int t = 0; t < s.tokens; ++t)
            for (int d = 0; d < s.head_dim; ++d)
              std::memcpy(strided.At(l, k, h, t, d), src.At(l, k, h, t, d), DTypeSize(dtype));
    const std::string path = Path("strided" + std::to_string(trial));
    ASSERT_TRUE(SaveKvFile(path, strided.AsConst()).ok());
    auto loaded = LoadKvFile(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_TRUE(SameElements(src, loaded->view()));
  }
}

TEST_F(KvFileTest, SameCacheWritesSameBytes) {
  std::mt19937 rng(5);
  KvCache c = RandomCache(rng, DType::kBF16, KvShape{2, 2, 17, 8});
  const std::string a = Path("det_a"), b = Path("det_b");
  ASSERT_TRUE(SaveKvFile(a, c.view()).ok());
  ASSERT_TRUE(SaveKvFile(b, c.view()).ok());
  auto fa = SafetensorsFile::Open(a);
  auto fb = SafetensorsFile::Open(b);
  ASSERT_TRUE(fa.ok() && fb.ok());
  EXPECT_EQ((*fa)->Names(), (*fb)->Names());
  EXPECT_EQ((*fa)->Names().size(), 4u);
}

TEST_F(KvFileTest, ReservedMetadataKeysRejected) {
  std::mt19937 rng(6);
  KvCache c = RandomCache(rng, DType::kF32, KvShape{1, 1, 4, 2});
  EXPECT_EQ(SaveKvFile(Path("r1"), c.view(), {{"format", "x"}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SaveKvFile(Path("r2"), c.view(), {{"version", "2"}}).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(KvFileTest, MissingFileIsNotFound) {
  EXPECT_EQ(LoadKvFile(Path("does_not_exist")).status().code(), StatusCode::kNotFound);
}

// Writes a safetensors file with the given tensors (all filled with 1s).
struct FakeTensor {
  std::string name;
  SafetensorsDType dtype;
  std::vector<int64_t> shape;
};
Status WriteFake(const std::string& path, const std::vector<FakeTensor>& specs,
                 const std::map<std::string, std::string>& meta) {
  std::vector<std::vector<std::byte>> bufs;
  std::vector<TensorToWrite> ts;
  for (const auto& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    bufs.emplace_back(static_cast<size_t>(n) * SafetensorsDTypeSize(s.dtype), std::byte{1});
  }
  for (size_t i = 0; i < specs.size(); ++i)
    ts.push_back({specs[i].name, specs[i].dtype, specs[i].shape, bufs[i]});
  return WriteSafetensors(path, ts, meta);
}

TEST_F(KvFileTest, MalformedFilesAreCorruption) {
  const std::map<std::string, std::string> ok_meta{{"format", "kvserve-kv"}, {"version", "1"}};
  const auto F32 = SafetensorsDType::kF32;
  struct Case {
    std::string what;
    std::vector<FakeTensor> tensors;
    std::map<std::string, std::string> meta;
    StatusCode code;
  };
  const std::vector<Case> cases = {
      {"no format tag", {{"layers.0.key", F32, {1, 2, 2}}, {"layers.0.value", F32, {1, 2, 2}}},
       {}, StatusCode::kCorruption},
      {"other format", {{"layers.0.key", F32, {1, 2, 2}}, {"layers.0.value", F32, {1, 2, 2}}},
       {{"format", "pt"}, {"version", "1"}}, StatusCode::kCorruption},
      {"future version", {{"layers.0.key", F32, {1, 2, 2}}, {"layers.0.value", F32, {1, 2, 2}}},
       {{"format", "kvserve-kv"}, {"version", "2"}}, StatusCode::kNotSupported},
      {"no tensors", {}, ok_meta, StatusCode::kCorruption},
      {"missing value", {{"layers.0.key", F32, {1, 2, 2}}}, ok_meta, StatusCode::kCorruption},
      {"missing layer 1", {{"layers.0.key", F32, {1, 2, 2}}, {"layers.0.value", F32, {1, 2, 2}},
                           {"layers.2.key", F32, {1, 2, 2}}, {"layers.2.value", F32, {1, 2, 2}}},
       ok_meta, StatusCode::kCorruption},
      {"extra tensor", {{"layers.0.key", F32, {1, 2, 2}}, {"layers.0.value", F32, {1, 2, 2}},
                        {"lm_head", F32, {2}}}, ok_meta, StatusCode::kCorruption},
      {"leading zero", {{"layers.00.key", F32, {1, 2, 2}}, {"layers.0.value", F32, {1, 2, 2}}},
       ok_meta, StatusCode::kCorruption},
      {"shape mismatch", {{"layers.0.key", F32, {1, 2, 2}}, {"layers.0.value", F32, {1, 3, 2}}},
       ok_meta, StatusCode::kCorruption},
      {"dtype mismatch", {{"layers.0.key", F32, {1, 2, 2}},
                          {"layers.0.value", SafetensorsDType::kF16, {1, 2, 2}}},
       ok_meta, StatusCode::kCorruption},
      {"integer dtype", {{"layers.0.key", SafetensorsDType::kI32, {1, 2, 2}},
                         {"layers.0.value", SafetensorsDType::kI32, {1, 2, 2}}},
       ok_meta, StatusCode::kCorruption},
      {"2-D tensor", {{"layers.0.key", F32, {2, 2}}, {"layers.0.value", F32, {2, 2}}}, ok_meta,
       StatusCode::kCorruption},
      {"empty axis", {{"layers.0.key", F32, {1, 0, 2}}, {"layers.0.value", F32, {1, 0, 2}}},
       ok_meta, StatusCode::kCorruption},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = Path("bad" + std::to_string(i));
    ASSERT_TRUE(WriteFake(path, cases[i].tensors, cases[i].meta).ok()) << cases[i].what;
    auto r = LoadKvFile(path);
    EXPECT_EQ(r.status().code(), cases[i].code) << cases[i].what << ": " << r.status().ToString();
  }
}

TEST_F(KvFileTest, SynthesizedCacheRoundTripsWithMetadata) {
  SynthOptions o;
  o.shape = KvShape{2, 2, 40, 16};
  o.seed = 3;
  auto c = SynthesizeKv(o);
  ASSERT_TRUE(c.ok());
  const std::string path = Path("synth");
  ASSERT_TRUE(SaveKvFile(path, c->view(), SynthMetadata(o)).ok());
  KvFileMetadata meta;
  auto loaded = LoadKvFile(path, &meta);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(meta.at("synthetic"), "true");
  EXPECT_EQ(0, std::memcmp(loaded->bytes(), c->bytes(), c->size_bytes()));
}

}  // namespace
}  // namespace kvserve
