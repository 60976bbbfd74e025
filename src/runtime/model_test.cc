#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/safetensors.h"
#include "kvserve/runtime.h"
#include "runtime/test_model_util.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;
using testing::TinyModelSpec;

std::unique_ptr<Model> LoadOrDie(const std::string& dir) {
  auto model = Model::Load(dir, RuntimeOptions{2});
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(model).value() : nullptr;
}

std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int n, int vocab) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

double RelError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

class ModelTest : public ::testing::TestWithParam<const char*> {};

// Prefill of a whole prompt and prefill of a prefix + decode of the rest
// (one token at a time and in chunks) agree on the logits and the KV cache.
TEST_P(ModelTest, PrefillDecodeConsistency) {
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 3; ++trial) {
    TinyModelSpec spec;
    spec.family = GetParam();
    spec.seed = rng();
    spec.tie = trial % 2;
    const std::string dir = testing::TempDir("model");
    ASSERT_TRUE(testing::WriteTinyModel(dir, spec));
    auto model = LoadOrDie(dir);
    ASSERT_TRUE(model);
    const int n = 20 + rng() % 30, split = 1 + rng() % (n - 1);
    auto tokens = RandomTokens(rng, n, spec.vocab);
    PrefillOptions all;
    all.all_logits = true;
    auto full = model->Prefill(tokens, all);
    ASSERT_TRUE(full.ok());
    ASSERT_EQ(full->logits.size(), size_t(n) * spec.vocab);

    auto part = model->Prefill(std::span(tokens).first(split));
    ASSERT_TRUE(part.ok());
    std::vector<float> got;
    for (int i = split; i < n;) {
      const int step = std::min<int>(n - i, 1 + rng() % 9);
      auto logits = model->Decode(&part->kv, std::span(tokens).subspan(i, step), true);
      ASSERT_TRUE(logits.ok());
      got.insert(got.end(), logits->begin(), logits->end());
      i += step;
    }
    std::vector<float> want(full->logits.begin() + size_t(split) * spec.vocab,
                            full->logits.end());
    EXPECT_LT(RelError(got, want), 1e-5);
    KvCache a = full->kv.ToCache(), b = part->kv.ToCache();
    ASSERT_EQ(a.size_bytes(), b.size_bytes());
    std::vector<float> fa(a.size_bytes() / 4), fb(fa.size());
    std::memcpy(fa.data(), a.bytes(), a.size_bytes());
    std::memcpy(fb.data(), b.bytes(), b.size_bytes());
    EXPECT_LT(RelError(fb, fa), 1e-5);
    EXPECT_EQ(part->kv.token_ids(), tokens);
  }
}

// The layer callback fires once per layer, in order, with that layer's final
// K/V (equal to the returned cache).
TEST_P(ModelTest, LayerReadyCallbackSeesFinalKv) {
  TinyModelSpec spec;
  spec.family = GetParam();
  spec.layers = 3;
  const std::string dir = testing::TempDir("cb");
  ASSERT_TRUE(testing::WriteTinyModel(dir, spec));
  auto model = LoadOrDie(dir);
  std::mt19937_64 rng(3);
  auto tokens = RandomTokens(rng, 33, spec.vocab);
  std::vector<KvCache> seen;
  PrefillOptions options;
  options.on_layer_ready = [&](int layer, const KvView& view) {
    EXPECT_EQ(layer, static_cast<int>(seen.size()));
    EXPECT_EQ(view.shape.layers, 1);
    EXPECT_EQ(view.shape.tokens, 33);
    auto copy = KvCache::CopyFrom(view);
    ASSERT_TRUE(copy.ok());
    seen.push_back(std::move(copy).value());
  };
  auto result = model->Prefill(tokens, options);
  ASSERT_TRUE(result.ok());
  ASSERT_EQ(seen.size(), 3u);
  KvCache all = result->kv.ToCache();
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(0, std::memcmp(seen[l].bytes(), all.bytes() + l * seen[l].size_bytes(),
                             seen[l].size_bytes()));
  }
}

// An all-ones keep-mask changes nothing; hiding tokens changes the output;
// state export/import carries the mask.
TEST_P(ModelTest, KeepMask) {
  TinyModelSpec spec;
  spec.family = GetParam();
  const std::string dir = testing::TempDir("mask");
  ASSERT_TRUE(testing::WriteTinyModel(dir, spec));
  auto model = LoadOrDie(dir);
  std::mt19937_64 rng(4);
  auto tokens = RandomTokens(rng, 40, spec.vocab);
  auto base = model->Prefill(tokens);
  ASSERT_TRUE(base.ok());
  const int32_t next = 5;
  auto plain = KvStateSet([&] {
    std::vector<std::byte> b(KvStateSize(base->kv));
    (void)KvStateGet(base->kv, b);
    return b;
  }());
  ASSERT_TRUE(plain.ok());
  auto ones = KvStateSet([&] {
    std::vector<std::byte> b(KvStateSize(base->kv));
    (void)KvStateGet(base->kv, b);
    return b;
  }());
  ASSERT_TRUE(ones.ok());
  std::vector<uint8_t> keep(40, 1);
  for (int l = 0; l < spec.layers; ++l)
    for (int g = 0; g < spec.kv_heads; ++g) ASSERT_TRUE(ones->SetKeepMask(l, g, keep).ok());
  auto a = model->Decode(&*plain, std::span(&next, 1));
  auto b = model->Decode(&*ones, std::span(&next, 1));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);

  for (int j = 4; j < 30; ++j) keep[j] = 0;
  ASSERT_TRUE(base->kv.SetKeepMask(0, 1, keep).ok());
  std::vector<std::byte> buffer(KvStateSize(base->kv));
  ASSERT_TRUE(KvStateGet(base->kv, buffer).ok());
  auto masked = KvStateSet(buffer);
  ASSERT_TRUE(masked.ok());
  auto c = model->Decode(&base->kv, std::span(&next, 1));
  auto d = model->Decode(&*masked, std::span(&next, 1));
  ASSERT_TRUE(c.ok() && d.ok());
  EXPECT_EQ(*c, *d);
  EXPECT_GT(RelError(*c, *a), 1e-4);
}

TEST_P(ModelTest, HalfPrecisionWeightsLoad) {
  for (auto dtype : {DType::kBF16, DType::kF16}) {
    TinyModelSpec spec;
    spec.family = GetParam();
    spec.dtype = dtype;
    const std::string dir = testing::TempDir("half");
    ASSERT_TRUE(testing::WriteTinyModel(dir, spec));
    auto model = LoadOrDie(dir);
    ASSERT_TRUE(model);
    const int32_t tokens[] = {1, 2, 3};
    auto r = model->Prefill(tokens);
    ASSERT_TRUE(r.ok());
    for (float x : r->logits) EXPECT_TRUE(std::isfinite(x));
  }
}

TEST_P(ModelTest, BadTokensAreRejected) {
  TinyModelSpec spec;
  spec.family = GetParam();
  const std::string dir = testing::TempDir("badtok");
  ASSERT_TRUE(testing::WriteTinyModel(dir, spec));
  auto model = LoadOrDie(dir);
  const int32_t bad[] = {1, spec.vocab};
  EXPECT_EQ(model->Prefill(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Prefill({}).status().code(), StatusCode::kInvalidArgument);
  const int32_t good[] = {1, 2};
  auto r = model->Prefill(good);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(model->Decode(&r->kv, bad).ok());
  EXPECT_EQ(r->kv.tokens(), 2) << "failed decode leaves the cache unchanged";
  KvState wrong(1, 1, 2);
  EXPECT_EQ(model->Decode(&wrong, good).status().code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Families, ModelTest, ::testing::Values("llama", "qwen2"));

// --- Malformed checkpoints: clear errors naming the file and tensor.

std::string MakeModel(const std::string& tag) {
  const std::string dir = testing::TempDir(tag);
  TinyModelSpec spec;
  spec.family = "qwen2";
  EXPECT_TRUE(testing::WriteTinyModel(dir, spec));
  return dir;
}

// Rewrites model.safetensors, letting `edit` change the tensor list.
void RewriteShard(const std::string& dir,
                  const std::function<void(std::vector<TensorToWrite>&,
                                           std::vector<std::vector<std::byte>>&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  std::vector<std::vector<std::byte>> storage;
  storage.reserve(1000);
  std::vector<TensorToWrite> tensors;
  for (const auto& name : (*file)->Names()) {
    auto t = (*file)->Find(name);
    storage.emplace_back(t->data.begin(), t->data.end());
    tensors.push_back({name, t->dtype, t->shape, storage.back()});
  }
  edit(tensors, storage);
  auto image = SerializeSafetensors(tensors);
  ASSERT_TRUE(image.ok());
  file->reset();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(image->data()), image->size());
}

void ExpectLoadError(const std::string& dir, StatusCode code, const std::string& needle) {
  auto model = Model::Load(dir);
  EXPECT_EQ(model.status().code(), code) << model.status().ToString();
  EXPECT_NE(model.status().message().find(needle), std::string::npos)
      << "'" << needle << "' not in: " << model.status().ToString();
}

TEST(MalformedCheckpointTest, MissingTensor) {
  const std::string dir = MakeModel("missing");
  RewriteShard(dir, [](auto& tensors, auto&) {
    std::erase_if(tensors, [](const TensorToWrite& t) {
      return t.name == "model.layers.1.self_attn.k_proj.bias";
    });
  });
  ExpectLoadError(dir, StatusCode::kNotFound, "model.layers.1.self_attn.k_proj.bias");
}

TEST(MalformedCheckpointTest, WrongDtype) {
  const std::string dir = MakeModel("dtype");
  RewriteShard(dir, [](auto& tensors, auto&) {
    for (auto& t : tensors) {
      if (t.name == "model.norm.weight") {  // 48 f32 = 192 bytes = 24 int64
        t.dtype = SafetensorsDType::kI64;
        t.shape = {static_cast<int64_t>(t.data.size() / 8)};
      }
    }
  });
  ExpectLoadError(dir, StatusCode::kCorruption, "model.norm.weight");
}

TEST(MalformedCheckpointTest, WrongShape) {
  const std::string dir = MakeModel("shape");
  RewriteShard(dir, [](auto& tensors, auto&) {
    for (auto& t : tensors) {
      if (t.name == "model.layers.0.mlp.down_proj.weight") std::swap(t.shape[0], t.shape[1]);
    }
  });
  ExpectLoadError(dir, StatusCode::kCorruption, "model.layers.0.mlp.down_proj.weight");
}

TEST(MalformedCheckpointTest, TruncatedShard) {
  const std::string dir = MakeModel("trunc");
  const std::string path = dir + "/model.safetensors";
  std::mt19937_64 rng(9);
  const auto size = fs::file_size(path);
  for (int trial = 0; trial < 20; ++trial) {
    fs::resize_file(path, rng() % size);
    ExpectLoadError(dir, StatusCode::kCorruption, "model.safetensors");
  }
}

TEST(MalformedCheckpointTest, HeaderLiesAboutOffsets) {
  const std::string dir = MakeModel("lie");
  const std::string path = dir + "/model.safetensors";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Grow the first data_offsets end so it overlaps the next tensor.
  const size_t pos = bytes.find("\"data_offsets\":[0,");
  ASSERT_NE(pos, std::string::npos);
  const size_t digit = bytes.find(']', pos) - 1;
  bytes[digit] = bytes[digit] == '9' ? '8' : static_cast<char>(bytes[digit] + 1);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  ExpectLoadError(dir, StatusCode::kCorruption, "model.safetensors");
}

TEST(MalformedCheckpointTest, MissingFiles) {
  const std::string dir = MakeModel("files");
  fs::remove(dir + "/model.safetensors");
  ExpectLoadError(dir, StatusCode::kNotFound, dir);
  fs::remove(dir + "/config.json");
  ExpectLoadError(dir, StatusCode::kNotFound, "config.json");
}

// --- Sampling.

TEST(SamplerTest, GreedyAndSeededSampling) {
  std::mt19937_64 rng(12);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(50 + rng() % 100);
    for (auto& x : logits) x = 3 * normal(rng);
    const int32_t argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    Sampler greedy({});
    EXPECT_EQ(greedy.Sample(logits), argmax);
    Sampler nucleus_tiny({1.0f, 1e-6f, rng()});
    EXPECT_EQ(nucleus_tiny.Sample(logits), argmax);
    const uint64_t seed = rng();
    Sampler a({0.8f, 0.9f, seed}), b({0.8f, 0.9f, seed});
    for (int i = 0; i < 30; ++i) EXPECT_EQ(a.Sample(logits), b.Sample(logits));
  }
  // Empirical frequencies follow softmax(logits / T).
  std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), -30.0f};
  Sampler s({1.0f, 1.0f, 77});
  std::vector<int> counts(4);
  for (int i = 0; i < 60000; ++i) counts[s.Sample(logits)]++;
  EXPECT_NEAR(counts[0] / 60000.0, 1 / 6.0, 0.01);
  EXPECT_NEAR(counts[1] / 60000.0, 2 / 6.0, 0.01);
  EXPECT_NEAR(counts[2] / 60000.0, 3 / 6.0, 0.01);
  // top_p = 0.6 keeps the two most likely tokens only (3/6 < 0.6 <= 5/6).
  Sampler top({1.0f, 0.6f, 78});
  for (int i = 0; i < 2000; ++i) EXPECT_GE(top.Sample(logits), 1);
}

// --- Head calibration.

TEST(HeadCalibrationTest, ScoresShapeRangeAndDeterminism) {
  TinyModelSpec spec;
  spec.family = "llama";
  const std::string dir = testing::TempDir("calib");
  ASSERT_TRUE(testing::WriteTinyModel(dir, spec));
  auto model = LoadOrDie(dir);
  std::mt19937_64 rng(13);
  std::vector<std::vector<int32_t>> prompts = {RandomTokens(rng, 120, spec.vocab),
                                               RandomTokens(rng, 90, spec.vocab)};
  HeadCalibrationOptions options;
  options.sink_tokens = 2;
  options.recent_tokens = 16;
  auto a = CalibrateHeadScores(*model, prompts, options);
  auto b = CalibrateHeadScores(*model, prompts, options);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->layers, spec.layers);
  EXPECT_EQ(a->kv_heads, spec.kv_heads);
  EXPECT_EQ(a->scores, b->scores);
  for (float s : a->scores) {
    EXPECT_TRUE(std::isfinite(s));
    EXPECT_GT(s, 0.0f);
  }
  // A wider window changes less.
  options.recent_tokens = 64;
  auto wide = CalibrateHeadScores(*model, prompts, options);
  ASSERT_TRUE(wide.ok());
  double narrow_sum = 0, wide_sum = 0;
  for (size_t i = 0; i < a->scores.size(); ++i) narrow_sum += a->scores[i], wide_sum += wide->scores[i];
  EXPECT_LT(wide_sum, narrow_sum);
  // Round trip through the head-score file.
  const std::string path = dir + "/heads.json";
  ASSERT_TRUE(a->Save(path).ok());
  auto loaded = HeadScores::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->layers, a->layers);
  ASSERT_EQ(loaded->scores.size(), a->scores.size());
  for (size_t i = 0; i < a->scores.size(); ++i) EXPECT_FLOAT_EQ(loaded->scores[i], a->scores[i]);
  options.recent_tokens = 500;
  EXPECT_EQ(CalibrateHeadScores(*model, prompts, options).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve
