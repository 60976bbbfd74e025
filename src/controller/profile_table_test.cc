// Copyright kvserve authors.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "controller/test_util.h"
#include "kvserve/controller.h"

namespace kvserve {
namespace {

TEST(ProfileTableTest, RawIsImplicitAtIndexZero) {
  std::mt19937_64 rng(1);
  const ProfileTable t = controller_test::RandomTable(rng, 3, 2);
  EXPECT_EQ(t.size(), 4);
  EXPECT_EQ(t.profile(ProfileTable::kRaw).spec, "none");
  EXPECT_EQ(t.profile(0).compression_ratio, 1.0);
  EXPECT_EQ(t.Quality(0, 0), 1.0);
}

TEST(ProfileTableTest, JsonRoundTripsRandomTables) {
  std::mt19937_64 rng(51);
  for (int i = 0; i < 200; ++i) {
    const ProfileTable random = controller_test::RandomTable(rng, 1 + static_cast<int>(rng() % 10), 3);
    std::vector<ProfileCost> rows(random.profiles().begin() + 1, random.profiles().end());
    for (ProfileCost& p : rows) p.streamed = rng() % 2 == 0;  // whole-frame rows keep their flag
    const ProfileTable t = ProfileTable::FromRowsAndWorkloads(rows, random.workloads()).value();
    Result<ProfileTable> back = ProfileTable::FromJson(t.ToJson());
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ASSERT_EQ(back->size(), t.size());
    ASSERT_EQ(back->workloads(), t.workloads());
    for (int p = 0; p < t.size(); ++p) {
      EXPECT_EQ(back->profile(p).spec, t.profile(p).spec);
      EXPECT_EQ(back->profile(p).compression_ratio, t.profile(p).compression_ratio);
      EXPECT_EQ(back->profile(p).encode_bytes_per_second, t.profile(p).encode_bytes_per_second);
      EXPECT_EQ(back->profile(p).overhead_seconds, t.profile(p).overhead_seconds);
      EXPECT_EQ(back->profile(p).streamed, t.profile(p).streamed);
      for (int w = 0; w < 3; ++w) EXPECT_EQ(back->Quality(p, w), t.Quality(p, w));
    }
  }
}

TEST(ProfileTableTest, RejectsMalformedTables) {
  const std::string row =
      R"({"spec":"a","compression_ratio":2,"encode_bytes_per_second":1e9,"decode_bytes_per_second":1e9})";
  EXPECT_TRUE(ProfileTable::FromJson(R"({"profiles":[)" + row + "]}").ok());
  EXPECT_EQ(ProfileTable::FromJson("{").status().code(), StatusCode::kCorruption);
  EXPECT_EQ(ProfileTable::FromJson(R"({"profiles":[{"spec":"a"}]})").status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(ProfileTable::FromJson(R"({"profiles":[)" + row + "," + row + "]}").status().code(),
            StatusCode::kInvalidArgument);  // duplicate spec
  EXPECT_EQ(ProfileTable::FromJson(
                R"({"profiles":[{"spec":"a","compression_ratio":-2,"encode_bytes_per_second":1e9,"decode_bytes_per_second":1e9}]})")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ProfileTable::FromJson(R"({"format":"other","profiles":[]})").status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(ProfileTable::FromJson(R"({"workloads":["x"],"profiles":[{"spec":"a","compression_ratio":2,"encode_bytes_per_second":1e9,"decode_bytes_per_second":1e9,"quality":{"y":1}}]})")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ProfileTable::Load("/nonexistent/table.json").status().code(), StatusCode::kIOError);
}

TEST(ProfileTableTest, ExampleTableLoads) {
  const std::string root = std::string(__FILE__).substr(0, std::string(__FILE__).rfind("/src/"));
  Result<ProfileTable> t = ProfileTable::Load(root + "/configs/profile_table.example.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_GE(t->size(), 5);
  EXPECT_TRUE(t->WorkloadIndex("chat").ok());
  EXPECT_EQ(t->WorkloadIndex("nope").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvserve
