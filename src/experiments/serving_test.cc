// Copyright kvserve authors. The serving commands' shared pieces: where the
// secret comes from, address files, the prefill worker's table and latency
// model.
#include "experiments/serving.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kvserve::lab {
namespace {

namespace fs = std::filesystem;

fs::path Temp(const std::string& name) {
  return fs::temp_directory_path() / ("kvserve-serving-" + std::to_string(::getpid()) + "-" + name);
}

TEST(ServingTest, SecretFromFileThenEnvironment) {
  const fs::path file = Temp("secret");
  std::ofstream(file) << "s3cret\r\n\n";
  auto s = LoadSecret(file.string(), {});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "s3cret");
  std::ofstream(file) << "\n";
  EXPECT_EQ(LoadSecret(file.string(), {}).status().code(), StatusCode::kInvalidArgument);
  fs::remove(file);
  EXPECT_EQ(LoadSecret(file.string(), {}).status().code(), StatusCode::kNotFound);
  ::setenv("KVSERVE_SECRET", "from-env", 1);
  EXPECT_EQ(*LoadSecret("", {}), "from-env");
  ::unsetenv("KVSERVE_SECRET");
  std::vector<std::string> lines;
  EXPECT_EQ(*LoadSecret("", [&](const std::string& l) { lines.push_back(l); }), "");
  ASSERT_EQ(lines.size(), 1u);  // the warning that peers are not authenticated
  EXPECT_NE(lines[0].find("not authenticated"), std::string::npos);
}

TEST(ServingTest, AddressFileHoldsOneLine) {
  const fs::path file = Temp("addr");
  ASSERT_TRUE(WriteAddressFile(file.string(), "127.0.0.1:4242").ok());
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "127.0.0.1:4242\n");
  fs::remove(file);
  EXPECT_FALSE(WriteAddressFile("/nonexistent-dir/addr", "x").ok());
}

TEST(ServingTest, PrefillTableAndLatencyModel) {
  const fs::path dir = Temp("profiles");
  fs::create_directories(dir);
  EXPECT_EQ(*PrefillTablePath("given.json", "/models/m", dir.string()), "given.json");
  auto missing = PrefillTablePath("", "/models/m", dir.string());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().ToString().find("m-unified.json"), std::string::npos);
  std::ofstream(dir / "m-unified.json") << "{}";
  auto found = PrefillTablePath("", "/models/m", dir.string());
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(fs::path(*found).filename(), "m-unified.json");
  fs::remove_all(dir);
  EXPECT_EQ(ParseWorkerLatencyModel("streamed")->kind, LatencyModelKind::kStreamed);
  EXPECT_EQ(ParseWorkerLatencyModel("serial")->kind, LatencyModelKind::kSerial);
  EXPECT_FALSE(ParseWorkerLatencyModel("fast").ok());
}

}  // namespace
}  // namespace kvserve::lab
