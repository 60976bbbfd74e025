// Prefill/decode disaggregation across processes: one process prefills and
// exports the KV state to a file, a second imports it and decodes; the
// tokens equal those of prefill + decode in one process (greedy and seeded
// sampling). The roles run in child processes of this test binary
// (PdRole.* cases, active only when the parent sets KVSERVE_PD_* variables).
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <filesystem>
#include <random>
#include <set>

#include "kvserve/process.h"
#include "kvserve/runtime.h"
#include "runtime/test_model_util.h"

namespace kvserve {
namespace {

const char* Env(const char* name) { return std::getenv(name); }

std::vector<int32_t> ReadIds(const std::string& path) {
  std::ifstream in(path);
  std::vector<int32_t> ids;
  int32_t x;
  while (in >> x) ids.push_back(x);
  return ids;
}

void WriteIds(const std::string& path, const std::vector<int32_t>& ids) {
  std::ofstream out(path);
  for (int32_t x : ids) out << x << "\n";
}

SamplingOptions SamplingFromEnv() {
  SamplingOptions s;
  if (Env("KVSERVE_PD_TEMPERATURE")) s.temperature = std::atof(Env("KVSERVE_PD_TEMPERATURE"));
  s.top_p = 0.9f;
  s.seed = 5;
  return s;
}

TEST(PdRole, Prefill) {
  if (!Env("KVSERVE_PD_MODEL")) GTEST_SKIP() << "child role of PdCrossProcessTest";
  auto model = Model::Load(Env("KVSERVE_PD_MODEL"));
  ASSERT_TRUE(model.ok());
  auto prefill = (*model)->Prefill(ReadIds(Env("KVSERVE_PD_PROMPT")));
  ASSERT_TRUE(prefill.ok());
  ASSERT_TRUE(ExportKV(prefill->kv, Env("KVSERVE_PD_STATE")).ok());
}

TEST(PdRole, Decode) {
  if (!Env("KVSERVE_PD_MODEL")) GTEST_SKIP() << "child role of PdCrossProcessTest";
  auto model = Model::Load(Env("KVSERVE_PD_MODEL"));
  ASSERT_TRUE(model.ok());
  auto kv = ImportKV(Env("KVSERVE_PD_STATE"));
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  Sampler sampler(SamplingFromEnv());
  auto tokens = Generate(**model, &*kv, kv->last_logits(), 24, &sampler, false);
  ASSERT_TRUE(tokens.ok());
  WriteIds(Env("KVSERVE_PD_OUT"), *tokens);
}

int RunChild(const std::string& filter, const std::vector<std::string>& env) {
  auto exe = SelfExecutable();
  if (!exe.ok()) return -1;
  auto pid = SpawnProcess({*exe, "--gtest_filter=" + filter}, env, /*stdout_to_null=*/false);
  if (!pid.ok()) return -1;
  int status = 0;
  waitpid(*pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(PdCrossProcessTest, ExportImportDecodeMatchesOneProcess) {
  const std::string dir = testing::TempDir("pd");
  testing::TinyModelSpec spec;
  spec.family = "qwen2";
  spec.layers = 3;
  spec.seed = 77;
  ASSERT_TRUE(testing::WriteTinyModel(dir + "/model", spec));
  std::mt19937_64 rng(78);
  std::vector<int32_t> prompt(150);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % spec.vocab);
  WriteIds(dir + "/prompt.txt", prompt);
  auto model = Model::Load(dir + "/model");
  ASSERT_TRUE(model.ok());
  for (const char* temperature : {"0", "0.8"}) {
    SCOPED_TRACE(std::string("temperature ") + temperature);
    auto prefill = (*model)->Prefill(prompt);
    ASSERT_TRUE(prefill.ok());
    setenv("KVSERVE_PD_TEMPERATURE", temperature, 1);
    Sampler sampler(SamplingFromEnv());
    auto expected = Generate(**model, &prefill->kv, prefill->logits, 24, &sampler, false);
    ASSERT_TRUE(expected.ok());
    const std::vector<std::string> env = {
        "KVSERVE_PD_MODEL=" + dir + "/model", "KVSERVE_PD_PROMPT=" + dir + "/prompt.txt",
        "KVSERVE_PD_STATE=" + dir + "/state.kvst", "KVSERVE_PD_OUT=" + dir + "/out.txt"};
    std::remove((dir + "/state.kvst").c_str());
    std::remove((dir + "/out.txt").c_str());
    ASSERT_EQ(RunChild("PdRole.Prefill", env), 0);
    ASSERT_EQ(RunChild("PdRole.Decode", env), 0);
    EXPECT_EQ(ReadIds(dir + "/out.txt"), *expected);
    EXPECT_GT(std::set<int32_t>(expected->begin(), expected->end()).size(), 1u);
  }
  unsetenv("KVSERVE_PD_TEMPERATURE");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvserve
