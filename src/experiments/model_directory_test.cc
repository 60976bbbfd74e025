// Which model and which profile table the serve commands use by default:
// the shipped model and its measured table; a missing model is an error
// unless the random-weight model is asked for by name; a model without a
// measured table has no default table.
#include "experiments/model_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "kvserve/controller.h"
#include "kvserve/runtime.h"

namespace kvserve::lab {
namespace {

// A fresh directory under the temp directory, named by `tag` and the pid.
std::string TempDir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() /
             ("kvserve-model-dir-test-" + tag + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

TEST(ModelDirectoryTest, MissingModelIsAnErrorUnlessRandomIsAskedFor) {
  const std::string empty = TempDir("no-models");
  const std::string fallback = TempDir("fallback") + "/model";
  std::string note;
  auto none = ResolveModelDirectory("", empty, fallback, &note);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound) << "a random model was made up";
  EXPECT_NE(none.status().message().find("--model random"), std::string::npos)
      << none.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(fallback));
  auto random = ResolveModelDirectory("random", empty, fallback, &note);
  ASSERT_TRUE(random.ok()) << random.status().ToString();
  EXPECT_EQ(*random, fallback);
  EXPECT_NE(note.find("random"), std::string::npos);
  EXPECT_TRUE(Model::Load(*random, {.threads = 1}).ok());
  EXPECT_EQ(DefaultProfileTablePath(*random, std::string(KVSERVE_TEST_SOURCE_DIR) + "/configs/profiles"),
            "");
  std::filesystem::remove_all(empty);
  std::filesystem::remove_all(std::filesystem::path(fallback).parent_path());
}

TEST(ModelDirectoryTest, TheShippedModelComesWithItsMeasuredTable) {
  const std::string root = KVSERVE_TEST_SOURCE_DIR;
  std::string note;
  auto dir = ResolveModelDirectory("", root + "/models", "/nonexistent", &note);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  const std::string table = DefaultProfileTablePath(*dir, root + "/configs/profiles");
  ASSERT_FALSE(table.empty());
  EXPECT_EQ(std::filesystem::path(table).filename().string(),
            std::filesystem::path(*dir).filename().string() + "-unified.json");
  auto loaded = ProfileTable::Load(table);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_GT(loaded->size(), 1);
  EXPECT_TRUE(loaded->WorkloadIndex("unified").ok());
}

}  // namespace
}  // namespace kvserve::lab
