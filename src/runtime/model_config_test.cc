#include <gtest/gtest.h>

#include "kvserve/runtime.h"
#include "runtime/test_model_util.h"

namespace kvserve {
namespace {

using testing::TinyConfigJson;
using testing::TinyModelSpec;

TEST(ModelConfigTest, ParsesBothFamilies) {
  for (const char* family : {"llama", "qwen2"}) {
    TinyModelSpec spec;
    spec.family = family;
    auto c = ParseModelConfig(TinyConfigJson(spec).dump());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->qkv_bias, std::string(family) == "qwen2");
    EXPECT_EQ(c->heads, spec.heads);
    EXPECT_EQ(c->kv_heads, spec.kv_heads);
    EXPECT_EQ(c->head_dim, spec.hidden / spec.heads);
    EXPECT_EQ(c->eos_token_ids, std::vector<int>{spec.vocab - 1});
  }
}

TEST(ModelConfigTest, UnsupportedOptionsAreClearErrors) {
  struct Case {
    const char* family;
    const char* key;
    nlohmann::json value;
    StatusCode code;
  };
  const Case cases[] = {
      {"llama", "rope_scaling", {{"type", "linear"}, {"factor", 2.0}}, StatusCode::kNotSupported},
      {"llama", "hidden_act", "gelu", StatusCode::kNotSupported},
      {"llama", "attention_bias", true, StatusCode::kNotSupported},
      {"llama", "mlp_bias", true, StatusCode::kNotSupported},
      {"llama", "pretraining_tp", 2, StatusCode::kNotSupported},
      {"llama", "some_new_knob", 3, StatusCode::kNotSupported},
      {"qwen2", "use_sliding_window", true, StatusCode::kNotSupported},
      {"qwen2", "layer_types", {"sliding_attention"}, StatusCode::kNotSupported},
      {"llama", "num_key_value_heads", 4, StatusCode::kInvalidArgument},  // 6 % 4 != 0
      {"llama", "vocab_size", -3, StatusCode::kInvalidArgument},
      {"gpt2", "model_type", "gpt2", StatusCode::kNotSupported},
      {"qwen2", "rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}},
       StatusCode::kNotSupported},
  };
  for (const Case& c : cases) {
    TinyModelSpec spec;
    spec.family = c.family;
    auto json = TinyConfigJson(spec);
    json[c.key] = c.value;
    auto parsed = ParseModelConfig(json.dump());
    EXPECT_EQ(parsed.status().code(), c.code) << c.key << ": " << parsed.status().ToString();
    EXPECT_NE(parsed.status().message().find(c.key), std::string::npos)
        << "error names the key: " << parsed.status().ToString();
  }
  EXPECT_EQ(ParseModelConfig("{not json").status().code(), StatusCode::kCorruption);
  auto json = TinyConfigJson(TinyModelSpec{});
  json.erase("hidden_size");
  EXPECT_EQ(ParseModelConfig(json.dump()).status().code(), StatusCode::kInvalidArgument);
}

// transformers >= 5 writes plain RoPE as rope_parameters; its theta is used
// and must agree with a top-level rope_theta.
TEST(ModelConfigTest, RopeParametersDefaultIsPlainRope) {
  for (const char* family : {"llama", "qwen2"}) {
    TinyModelSpec spec;
    spec.family = family;
    auto json = TinyConfigJson(spec);
    json.erase("rope_theta");
    json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 12345.0}};
    auto parsed = ParseModelConfig(json.dump());
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(parsed->rope_theta, 12345.0);
    json["rope_theta"] = 999.0;
    EXPECT_EQ(ParseModelConfig(json.dump()).status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(ModelConfigTest, FlopsGrowWithContext) {
  auto c = ParseModelConfig(TinyConfigJson(TinyModelSpec{}).dump());
  ASSERT_TRUE(c.ok());
  EXPECT_GT(c->ForwardFlops(100, 1, 1), c->ForwardFlops(10, 1, 1));
  EXPECT_NEAR(c->ForwardFlops(0, 10, 0) / 10, c->ForwardFlops(0, 1, 0),
              c->ForwardFlops(0, 1, 0));
}

}  // namespace
}  // namespace kvserve
