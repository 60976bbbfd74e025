// KIVI's layout as the code writes it, and as docs/profiles.md and
// docs/format.md §5.3 must describe it: keys per channel in groups of
// `group` tokens; values per token over the whole head_dim (one scale and
// zero per token), whatever `group` is.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "quantizers/grid_kernels.h"
#include "quantizers/quantizers.h"

namespace kvserve::quantizers {
namespace {

std::string ReadDoc(const std::string& name) {
  std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/docs/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(KiviLayoutTest, ValuesHaveOneScalePerTokenAndTheDocsSaySo) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    const int dims[] = {16, 32, 64, 128};
    const KvShape shape{2, 1 + static_cast<int>(rng() % 4), 256, dims[rng() % 4]};
    QuantConfig c;
    c.type = QuantizerType::kKivi;
    c.group = 1 << (rng() % 5);  // 1..16: divides every chunk and, for V, would split head_dim
    auto q = NewKiviQuantizer(c, shape);
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      pipeline::ChunkInfo info;
      info.layer = 1;
      info.num_layers = shape.layers;
      info.kind = kind;
      info.kv_heads = shape.kv_heads;
      info.head_dim = shape.head_dim;
      info.tokens = 16 * (1 + static_cast<int>(rng() % 8));
      info.total_tokens = shape.tokens;
      pipeline::ChunkLayout layout;
      ASSERT_TRUE(q->Layout(info, &layout).ok());
      const size_t per_group = ParamBytesPerGroup(GridSpec{16, false, c.scale_dtype});
      const size_t groups = kind == KvKind::kKey
                                ? static_cast<size_t>(info.tokens / c.group) * shape.head_dim
                                : static_cast<size_t>(info.tokens);  // one per token
      EXPECT_EQ(layout.param_bytes, groups * per_group * shape.kv_heads)
          << (kind == KvKind::kKey ? "K" : "V") << " group " << c.group;
    }
  }
  // The parameter reference must say the same (it once said values were
  // grouped over `group` channels).
  const std::string profiles = ReadDoc("profiles.md");
  EXPECT_EQ(profiles.find("values per token, grouped over `group` channels"), std::string::npos);
  EXPECT_NE(profiles.find("values per token over the whole `head_dim`"), std::string::npos);
  EXPECT_NE(ReadDoc("format.md").find("| kivi | channel, group tokens | token, whole D |"),
            std::string::npos);
}

}  // namespace
}  // namespace kvserve::quantizers
