// Copyright kvserve authors. The runtime against an independent PyTorch
// forward (scripts/make_tiny_model.py --reference, run by ctest as a fixture):
// float32 logits over a 512-token prompt within relative error 1e-4, and 64
// identical greedy tokens, for random-weight Llama and Qwen2 GQA models. The
// test also shows it would catch a wrong runtime: a perturbed weight or a
// wrong RoPE theta pushes the error far past the tolerance.
//
// KVSERVE_REFERENCE_DIR names the fixture root (one sub-directory per
// family). Without fixtures (no torch in the interpreter) the tests skip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "runtime/reference/reference_util.h"
#include "kvserve/runtime.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;
constexpr double kTolerance = 1e-4;

std::string FixtureDir(const std::string& family) {
  const char* root = std::getenv("KVSERVE_REFERENCE_DIR");
  return root ? (fs::path(root) / family).string() : "";
}

struct Reference {
  std::vector<int32_t> prompt, generated;
  std::vector<float> logits, generated_logits;
};

bool LoadReference(const std::string& dir, Reference* ref) {
  auto file = SafetensorsFile::Open(dir + "/reference.safetensors");
  if (!file.ok()) return false;
  ref->prompt = ReadTensor<int32_t>(**file, "prompt");
  ref->generated = ReadTensor<int32_t>(**file, "generated");
  ref->logits = ReadTensor<float>(**file, "logits");
  ref->generated_logits = ReadTensor<float>(**file, "generated_logits");
  return true;
}

// Relative error of the runtime's prompt logits against the reference.
double PromptError(const std::string& model_dir, const Reference& ref) {
  auto model = Model::Load(model_dir);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return INFINITY;
  PrefillOptions options;
  options.all_logits = true;
  auto result = (*model)->Prefill(ref.prompt, options);
  EXPECT_TRUE(result.ok());
  return result.ok() ? RelError(result->logits, ref.logits) : INFINITY;
}

class TorchReferenceTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = FixtureDir(GetParam());
    if (dir_.empty() || !LoadReference(dir_, &ref_)) {
      GTEST_SKIP() << "no PyTorch reference fixture at '" << dir_
                   << "' (needs /usr/bin/python3 with torch)";
    }
    // The reference must be able to fail us: real prompt, varied logits,
    // more than one distinct generated token.
    ASSERT_EQ(ref_.prompt.size(), 512u);
    ASSERT_EQ(ref_.generated.size(), 64u);
    ASSERT_EQ(ref_.logits.size() % ref_.prompt.size(), 0u);
    EXPECT_GT(std::set<int32_t>(ref_.generated.begin(), ref_.generated.end()).size(), 1u);
    double sum_sq = 0;
    for (float x : ref_.logits) sum_sq += double(x) * x;
    EXPECT_GT(sum_sq / ref_.logits.size(), 1e-2);
  }
  std::string dir_;
  Reference ref_;
};

TEST_P(TorchReferenceTest, PromptLogitsMatch) {
  const double error = PromptError(dir_, ref_);
  std::cout << GetParam() << ": prompt logits relative error " << error << "\n";
  EXPECT_LE(error, kTolerance);
}

TEST_P(TorchReferenceTest, GreedyGenerationMatches) {
  auto model = Model::Load(dir_);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto prefill = (*model)->Prefill(ref_.prompt);
  ASSERT_TRUE(prefill.ok());
  Sampler greedy({});
  // Collect the logits of every step too.
  std::vector<int32_t> tokens;
  std::vector<float> step_logits = prefill->logits, all_logits;
  for (size_t i = 0; i < ref_.generated.size(); ++i) {
    all_logits.insert(all_logits.end(), step_logits.begin(), step_logits.end());
    const int32_t next = greedy.Sample(step_logits);
    tokens.push_back(next);
    auto logits = (*model)->Decode(&prefill->kv, std::span(&next, 1));
    ASSERT_TRUE(logits.ok());
    step_logits = std::move(logits).value();
  }
  EXPECT_EQ(tokens, ref_.generated);
  const double error = RelError(all_logits, ref_.generated_logits);
  std::cout << GetParam() << ": decode-step logits relative error " << error << "\n";
  EXPECT_LE(error, kTolerance);

  // The library's Generate loop gives the same tokens.
  auto again = (*model)->Prefill(ref_.prompt);
  ASSERT_TRUE(again.ok());
  auto generated = Generate(**model, &again->kv, again->logits, 64, &greedy, /*stop_at_eos=*/false);
  ASSERT_TRUE(generated.ok());
  EXPECT_EQ(*generated, ref_.generated);
}

// Non-vacuity: small model errors move the logits far past the tolerance.
TEST_P(TorchReferenceTest, DetectsWrongRuntime) {
  const std::string copy = (fs::temp_directory_path() /
                            ("kvserve_ref_perturbed_" + std::string(GetParam()) + "_" +
                             std::to_string(::getpid())))
                               .string();
  fs::remove_all(copy);
  fs::create_directories(copy);
  fs::copy_file(dir_ + "/config.json", copy + "/config.json");

  // 1. One row of one K projection scaled by 1.05.
  {
    auto file = SafetensorsFile::Open(dir_ + "/model.safetensors");
    ASSERT_TRUE(file.ok());
    std::vector<std::vector<std::byte>> storage;
    storage.reserve(1000);
    std::vector<TensorToWrite> tensors;
    for (const auto& name : (*file)->Names()) {
      auto t = (*file)->Find(name);
      storage.emplace_back(t->data.begin(), t->data.end());
      if (name == "model.layers.1.self_attn.k_proj.weight") {
        float* w = reinterpret_cast<float*>(storage.back().data());
        for (int64_t i = 0; i < t->shape[1]; ++i) w[3 * t->shape[1] + i] *= 1.05f;
      }
      tensors.push_back({name, t->dtype, t->shape, storage.back()});
    }
    ASSERT_TRUE(WriteSafetensors(copy + "/model.safetensors", tensors).ok());
  }
  const double weight_error = PromptError(copy, ref_);
  std::cout << GetParam() << ": error with a perturbed weight " << weight_error << "\n";
  EXPECT_GT(weight_error, 10 * kTolerance);

  // 2. RoPE theta off by 1%.
  fs::copy_file(dir_ + "/model.safetensors", copy + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  nlohmann::json config;
  std::ifstream(dir_ + "/config.json") >> config;
  config["rope_theta"] = config["rope_theta"].get<double>() * 1.01;
  std::ofstream(copy + "/config.json") << config.dump();
  const double theta_error = PromptError(copy, ref_);
  std::cout << GetParam() << ": error with rope_theta * 1.01 " << theta_error << "\n";
  EXPECT_GT(theta_error, 10 * kTolerance);

  // 3. RMSNorm eps 10x.
  config["rope_theta"] = config["rope_theta"].get<double>() / 1.01;
  config["rms_norm_eps"] = config["rms_norm_eps"].get<double>() * 1000;
  std::ofstream(copy + "/config.json") << config.dump();
  const double eps_error = PromptError(copy, ref_);
  std::cout << GetParam() << ": error with rms_norm_eps * 1000 " << eps_error << "\n";
  EXPECT_GT(eps_error, kTolerance);
  fs::remove_all(copy);
}

INSTANTIATE_TEST_SUITE_P(Families, TorchReferenceTest, ::testing::Values("llama", "qwen2"));

}  // namespace
}  // namespace kvserve
