// Copyright kvserve authors. The lab's small shared pieces the commands
// lean on: sample summaries, seeded payloads,
// binary files, profile lists, head scores, frame reports, Pareto fronts,
// and the load generator's requests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "experiments/frame_report.h"
#include "experiments/lab.h"
#include "experiments/load_generator.h"
#include "experiments/profile_inputs.h"
#include "kvserve/kv_file.h"
#include "kvserve/profiler.h"

namespace kvserve::lab {
namespace {

TEST(LabInputsTest, SummarizeIsOrderFree) {
  EXPECT_EQ(Summarize({}).count, 0u);
  const SampleSummary s = Summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(s.count, 5u);
  EXPECT_EQ(s.median, 3);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 5);
  EXPECT_EQ(Summarize({4, 1, 3, 2}).median, 3);  // the upper middle
}

TEST(LabInputsTest, RandomBytesAreSeeded) {
  EXPECT_EQ(RandomBytes(1001, 5), RandomBytes(1001, 5));
  EXPECT_NE(RandomBytes(1001, 5), RandomBytes(1001, 6));
  const auto b = RandomBytes(4096, 9);
  EXPECT_EQ(b.size(), 4096u);
  EXPECT_GT(std::set<uint8_t>(b.begin(), b.end()).size(), 200u);
}

TEST(LabInputsTest, BinaryFilesRoundTripAndMissingIsNotFound) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kvserve-lab-bin-" + std::to_string(::getpid())))
          .string();
  const auto bytes = RandomBytes(70000, 3);
  ASSERT_TRUE(WriteBinaryFile(path, bytes).ok());
  auto back = ReadBinaryFile(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, bytes);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(path);
  EXPECT_EQ(ReadBinaryFile(path).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(WriteBinaryFile("/nonexistent-dir/x", bytes).ok());
}

TEST(LabInputsTest, ProfileListsSplitOutsideParentheses) {
  EXPECT_EQ(SplitProfileList({"kivi-2, kivi(k=2,v=4)", " ", "none,"}),
            (std::vector<std::string>{"kivi-2", "kivi(k=2,v=4)", "none"}));
  EXPECT_TRUE(ResolveProfile("kivi-2").ok());
  auto bad = ResolveProfile("no-such-profile");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("no-such-profile"), std::string::npos);
}

TEST(LabInputsTest, HeadScoresOnlyWhereNeeded) {
  const KvShape shape{2, 2, 16, 8};
  auto none = LoadHeadScoresFor(*Profile::Parse("kivi-2"), "", shape);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->get(), nullptr);
  EXPECT_EQ(LoadHeadScoresFor(*Profile::Parse("mixhq"), "", shape).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(LabInputsTest, FrameReportAccountsForEveryByte) {
  for (uint64_t seed : {4u, 5u}) {
    auto kv = SynthesizeKv({.shape = {3, 2, 64, 32}, .dtype = DType::kF16, .seed = seed});
    ASSERT_TRUE(kv.ok());
    auto m = MeasureProfileCost(*Profile::Parse("kivi-2"), kv->view(),
                                {.repeats = 1, .keep_output = true, .progress = {}});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    auto r = ReportFrame(m->frame);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->file_bytes, m->frame.size());
    EXPECT_EQ(r->logical_bytes, static_cast<uint64_t>(kv->size_bytes()));
    EXPECT_NEAR(r->compression_ratio, m->codec.compression_ratio, 1e-9);
    uint64_t sections = 0, chunks = 0, layers = 0;
    for (const FrameSection& s : r->sections) sections += s.bytes;
    for (const auto& c : r->info.chunks) chunks += c.size;
    for (uint64_t b : r->layer_bytes) layers += b;
    EXPECT_EQ(sections, r->info.stats.total_bytes);
    EXPECT_EQ(layers, chunks);
    ASSERT_EQ(r->layer_bytes.size(), 6u);
    for (uint64_t b : r->layer_bytes) EXPECT_GT(b, 0u);
    const auto j = r->Json("f");
    EXPECT_EQ(j["layers"].size(), 3u);
    EXPECT_EQ(j["chunks"].size(), r->info.chunks.size());
    EXPECT_EQ(j["sections"]["total"], r->info.stats.total_bytes);
    std::vector<uint8_t> damaged = m->frame;
    damaged[damaged.size() / 2] ^= 0x40;
    EXPECT_FALSE(ReportFrame(damaged).ok());
  }
}

TEST(LabInputsTest, DrawnRequestsAreSeededAndRepeatPrompts) {
  LoadOptions o{
      .requests = 40, .prompt_tokens = 12, .vocab = 50, .repeat_fraction = 0.5, .seed = 3};
  auto a = DrawRequests(o);
  auto b = DrawRequests(o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 40u);
  std::set<std::vector<int32_t>> distinct;
  for (size_t i = 0; i < a->size(); ++i) {
    const ServeRequest& r = (*a)[i];
    EXPECT_EQ(r.id, i);
    EXPECT_EQ(r.prompt, (*b)[i].prompt);
    EXPECT_EQ(r.prompt.size(), 12u);
    EXPECT_TRUE(r.use_pool);
    for (int32_t t : r.prompt) EXPECT_LT(t, 50);
    distinct.insert(r.prompt);
  }
  EXPECT_LT(distinct.size(), 35u);  // about half repeat an earlier prompt
  EXPECT_GT(distinct.size(), 5u);
  o.seed = 4;
  EXPECT_NE(DrawRequests(o)->front().prompt, a->front().prompt);
  o.text_prompt = {7, 8, 9};
  auto text = DrawRequests(o);
  ASSERT_TRUE(text.ok());
  for (const ServeRequest& r : *text) EXPECT_EQ(r.prompt, o.text_prompt);
  EXPECT_FALSE(DrawRequests({.vocab = 0}).ok());
}

}  // namespace
}  // namespace kvserve::lab
