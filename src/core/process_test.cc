// Copyright kvserve authors. kvserve/process.h: SpawnProcess and SelfExecutable.
#include "kvserve/process.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace kvserve {
namespace {

int Wait(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A shell that exits 0 exactly when `condition` holds in it.
std::vector<std::string> Check(const std::string& condition) {
  return {"/bin/sh", "-c", "if " + condition + "; then exit 0; else exit 1; fi"};
}

TEST(SpawnTest, EnvironmentEntriesReplaceInheritedOnesAndTheRestIsKept) {
  std::mt19937_64 rng(std::random_device{}());
  const std::string value = std::to_string(rng()), kept = std::to_string(rng());
  ASSERT_EQ(::setenv("KVS_SPAWN_TEST_SET", "inherited", 1), 0);
  ASSERT_EQ(::setenv("KVS_SPAWN_TEST_KEPT", kept.c_str(), 1), 0);
  auto pid = SpawnProcess(
      Check("[ \"$KVS_SPAWN_TEST_SET\" = " + value + " ] && [ \"$KVS_SPAWN_TEST_KEPT\" = " + kept +
            " ] && [ \"$(env | grep -c '^KVS_SPAWN_TEST_SET=')\" = 1 ]"),
      {"KVS_SPAWN_TEST_SET=" + value}, /*stdout_to_null=*/false);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_EQ(Wait(*pid), 0);
  // The parent's environment is unchanged.
  EXPECT_STREQ(::getenv("KVS_SPAWN_TEST_SET"), "inherited");
}

TEST(SpawnTest, StdoutGoesToDevNullOnlyWhenAsked) {
  const std::string devnull = "[ \"$(readlink /proc/$$/fd/1)\" = /dev/null ]";
  auto quiet = SpawnProcess(Check(devnull), {}, /*stdout_to_null=*/true);
  ASSERT_TRUE(quiet.ok());
  EXPECT_EQ(Wait(*quiet), 0);
  // Under ctest stdout is a pipe or file, not /dev/null.
  std::error_code ec;
  if (std::filesystem::read_symlink("/proc/self/fd/1", ec) != "/dev/null") {
    auto loud = SpawnProcess(Check(devnull), {}, /*stdout_to_null=*/false);
    ASSERT_TRUE(loud.ok());
    EXPECT_EQ(Wait(*loud), 1);
  }
}

TEST(SpawnTest, BadArgumentsAndMissingProgramsAreClearErrors) {
  EXPECT_EQ(SpawnProcess({}, {}, false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SpawnProcess({"/bin/true"}, {"NO_EQUALS_SIGN"}, false).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SpawnProcess({"/bin/true"}, {"=value"}, false).status().code(),
            StatusCode::kInvalidArgument);
  auto missing = SpawnProcess({"/nonexistent/kvserve-spawn-test"}, {}, false);
  EXPECT_EQ(missing.status().code(), StatusCode::kIOError);
}

TEST(SpawnTest, SelfExecutableIsThisTestBinary) {
  auto exe = SelfExecutable();
  ASSERT_TRUE(exe.ok());
  EXPECT_NE(exe->find("test_core"), std::string::npos) << *exe;
}

}  // namespace
}  // namespace kvserve
