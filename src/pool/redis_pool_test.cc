// The Redis backend against a real redis-server started on a free loopback
// port in a temporary directory: values round-trip binary-safe under
// namespaced keys; after Redis is killed and restarted the client
// reconnects, every request completes or fails with a clear Unavailable,
// and no Get returns wrong bytes; with appendonly persistence the contents
// survive a restart. Skipped when redis-server is not installed.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "kvserve/pool.h"
#include "kvserve/transport.h"
#include "pool/redis_cluster_test_util.h"

extern char** environ;

namespace kvserve {
namespace {

constexpr const char* kRedisServer = "/usr/bin/redis-server";

// The process_id the Redis server on 127.0.0.1:`port` reports (INFO
// server), or -1 when none answers.
int64_t ServerPid(int port) {
  auto tcp = NewTcpTransport();
  auto s = tcp->Connect("127.0.0.1:" + std::to_string(port), 0.5);
  if (!s.ok()) return -1;
  const std::string info = "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";
  if (!(*s)->Write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(info.data()), info.size()), 1).ok())
    return -1;
  std::string reply;
  uint8_t buf[4096];
  while (reply.find("\r\n", reply.find("process_id:") == std::string::npos
                                   ? reply.size()
                                   : reply.find("process_id:")) == std::string::npos) {
    auto n = (*s)->Read(buf, 1);
    if (!n.ok()) return -1;
    reply.append(reinterpret_cast<const char*>(buf), *n);
  }
  return std::atoll(reply.c_str() + reply.find("process_id:") + 11);
}

// A redis-server child process bound to 127.0.0.1 only.
class RedisProcess {
 public:
  RedisProcess(std::string dir, int port, bool persistent)
      : dir_(std::move(dir)), port_(port), persistent_(persistent) {}
  ~RedisProcess() { Stop(SIGKILL); }

  bool Start() {
    std::vector<std::string> args = {kRedisServer, "--port", std::to_string(port_), "--bind",
                                     "127.0.0.1", "--dir", dir_, "--logfile", dir_ + "/redis.log",
                                     "--daemonize", "no", "--save", ""};
    if (persistent_) {
      args.insert(args.end(), {"--appendonly", "yes", "--appendfsync", "always"});
    } else {
      args.insert(args.end(), {"--appendonly", "no"});
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, kRedisServer, nullptr, nullptr, argv.data(), environ) != 0) return false;
    // Wait (bounded) until it answers, and make sure it is this process:
    // another one may have taken the port since it was picked.
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {  // it exited: e.g. port in use
        pid_ = -1;
        return false;
      }
      const int64_t answering = ServerPid(port_);
      if (answering == pid_) return true;
      if (answering > 0) break;  // someone else's server
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    Stop(SIGKILL);
    return false;
  }

  // Signals the process and reaps it (bounded: SIGKILL after 5 s).
  void Stop(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  int port() const { return port_; }

 private:
  std::string dir_;
  int port_;
  bool persistent_;
  pid_t pid_ = -1;
};

class RedisPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kRedisServer)) GTEST_SKIP() << "redis-server not installed";
    char tmpl[] = "/tmp/kvserve-redis-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    redis_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // On a free port; when another process takes it first, on another one.
  void StartRedis(bool persistent) {
    for (int attempt = 0; attempt < 10; ++attempt) {
      redis_ = std::make_unique<RedisProcess>(dir_, pooltest::FreePortBelowEphemeralRange(), persistent);
      if (redis_->Start()) return;
    }
    FAIL() << "redis-server did not start";
  }
  RedisPoolOptions Options() const {
    RedisPoolOptions o;
    o.port = redis_->port();
    o.key_prefix = "kvtest";
    o.reconnect_attempts = 3;
    o.connect_timeout_seconds = 0.5;
    o.command_timeout_seconds = 5;
    return o;
  }

  std::string dir_;
  std::unique_ptr<RedisProcess> redis_;
};

std::vector<uint8_t> ValueFor(const PoolKey& key) {
  std::mt19937_64 rng(key.prefix_hash * 31 + key.profile.size());
  std::vector<uint8_t> v(100 + rng() % 20000);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  v[0] = 0;  // binary-safe: embedded NULs and CR/LF
  if (v.size() > 3) v[1] = '\r', v[2] = '\n';
  return v;
}

TEST_F(RedisPoolTest, RoundTripsBinaryValuesUnderNamespacedKeys) {
  StartRedis(false);
  auto pool = NewRedisPool(Options());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const std::string model = "qwen:tiny %x";  // separator and escape characters
  for (uint64_t h = 0; h < 6; ++h)
    for (const char* profile : {"none", "kivi-2", "kivi(k=2,v=2,group=32)"}) {
      PoolKey key{model, h * 0x9e3779b97f4a7c15ull, profile};
      ASSERT_TRUE((*pool)->Put(key, ValueFor(key)).ok());
    }
  PoolKey key{model, 2 * 0x9e3779b97f4a7c15ull, "kivi-2"};
  std::vector<uint8_t> got;
  ASSERT_TRUE((*pool)->Get(key, &got).ok());
  EXPECT_EQ(got, ValueFor(key));
  auto entries = (*pool)->Lookup(model, key.prefix_hash);
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].profile, "kivi(k=2,v=2,group=32)");  // sorted by profile
  EXPECT_EQ((*entries)[1].profile, "kivi-2");
  EXPECT_EQ((*entries)[1].bytes, ValueFor(key).size());
  EXPECT_TRUE((*pool)->Lookup("qwen", key.prefix_hash)->empty());  // no prefix collision
  ASSERT_TRUE((*pool)->Delete(key).ok());
  EXPECT_EQ((*pool)->Delete(key).code(), StatusCode::kNotFound);
  EXPECT_EQ((*pool)->Get(key, &got).code(), StatusCode::kNotFound);
  auto stats = (*pool)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->entries, 17u);
}

TEST_F(RedisPoolTest, RestartMidRunReconnectsOrFailsClearly) {
  StartRedis(false);
  auto pool = NewRedisPool(Options());
  ASSERT_TRUE(pool.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, unavailable{0}, not_found{0}, wrong{0}, other{0};
  std::thread worker([&] {
    std::mt19937 rng(3);
    for (int i = 0; i < 4000 && !stop.load(); ++i) {
      PoolKey key{"m", rng() % 20, "kivi-2"};
      std::vector<uint8_t> got;
      Status s = (rng() % 2) ? (*pool)->Put(key, ValueFor(key)) : (*pool)->Get(key, &got);
      if (s.ok()) {
        ++ok;
        if (!got.empty() && got != ValueFor(key)) ++wrong;
      } else if (s.code() == StatusCode::kUnavailable) {
        ++unavailable;
        EXPECT_NE(s.message().find("redis at 127.0.0.1:"), std::string::npos) << s.ToString();
      } else if (s.code() == StatusCode::kNotFound) {
        ++not_found;
      } else {
        ++other;
        ADD_FAILURE() << s.ToString();
      }
    }
  });
  // Each phase waits for what the worker does, not for a fixed time: some
  // requests done; Redis killed and a request failed; Redis back and more
  // requests done.
  auto wait_for = [&](auto done) {
    for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return done();
  };
  EXPECT_TRUE(wait_for([&] { return ok.load() >= 50; }));
  redis_->Stop(SIGKILL);
  EXPECT_TRUE(wait_for([&] { return unavailable.load() >= 1; })) << "no request failed while down";
  ASSERT_TRUE(redis_->Start());
  const int ok_before = ok.load();
  EXPECT_TRUE(wait_for([&] { return ok.load() >= ok_before + 50; })) << "no reconnect after the restart";
  stop = true;
  worker.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(ok.load(), 0);
  // After the restart the same client works again.
  PoolKey key{"m", 1000, "none"};
  ASSERT_TRUE((*pool)->Put(key, ValueFor(key)).ok());
  std::vector<uint8_t> got;
  ASSERT_TRUE((*pool)->Get(key, &got).ok());
  EXPECT_EQ(got, ValueFor(key));
  // While Redis is down, requests fail (bounded) with a clear error.
  redis_->Stop(SIGKILL);
  Status s = (*pool)->Get(key, &got);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("redis at"), std::string::npos) << s.ToString();
}

TEST_F(RedisPoolTest, PersistentContentsSurviveARestart) {
  StartRedis(true);
  {
    auto pool = NewRedisPool(Options());
    ASSERT_TRUE(pool.ok());
    for (uint64_t h = 0; h < 8; ++h) {
      PoolKey key{"model", h, h % 2 ? "kivi-2" : "none"};
      ASSERT_TRUE((*pool)->Put(key, ValueFor(key)).ok());
    }
    redis_->Stop(SIGTERM);
    ASSERT_TRUE(redis_->Start());
    // The same client object reconnects and sees the old contents.
    for (uint64_t h = 0; h < 8; ++h) {
      PoolKey key{"model", h, h % 2 ? "kivi-2" : "none"};
      std::vector<uint8_t> got;
      Status s = (*pool)->Get(key, &got);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(got, ValueFor(key));
    }
  }
  // A crash (SIGKILL) with appendfsync always loses nothing either.
  redis_->Stop(SIGKILL);
  ASSERT_TRUE(redis_->Start());
  auto fresh = NewRedisPool(Options());
  ASSERT_TRUE(fresh.ok());
  auto entries = (*fresh)->Lookup("model", 3);
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].profile, "kivi-2");
  EXPECT_EQ((*fresh)->Stats()->entries, 8u);
}

}  // namespace
}  // namespace kvserve
