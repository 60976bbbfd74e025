// libFuzzer target for a model directory's text files read by the runtime:
// tokenizer.json (Tokenizer::FromHfJson: BPE vocabulary and merges, the
// split regex compiled by Oniguruma, added tokens, normalizer, template)
// and generation_config.json (ApplyGenerationConfig). A tokenizer that
// loads encodes a few fixed strings to ids it can decode, and decoding ids
// it does not know is an error, not a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/runtime.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ModelConfig config;
  (void)ApplyGenerationConfig(text, &config);
  auto tokenizer = Tokenizer::FromHfJson(text, "fuzz");
  if (!tokenizer.ok()) return 0;
  const Tokenizer& t = **tokenizer;
  for (const char* s : {"", "Hello, world! 12345", "  two\n\nlines\t", "caf\xc3\xa9 \xe2\x82\xac",
                        "broken \xff\xfe utf-8"}) {
    auto ids = t.Encode(s);
    if (!ids.ok()) continue;
    (void)t.Decode(*ids);
    (void)t.EncodePrompt(s, config.bos_token_id);
  }
  const std::vector<int32_t> unknown = {-1, t.vocab_size(), 1 << 30};
  (void)t.Decode(unknown);
  return 0;
}
