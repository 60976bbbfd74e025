// Failures between the serve workers, injected through the fault-injecting
// transport and with real processes: a dropped connection, bytes corrupted
// on the wire, a slow consumer, a decode worker killed mid-transfer, Redis
// restarted under the pool. Every request either completes with exactly the
// tokens of a single-process run (lossless profile), or fails with a clear
// error; none is answered from corrupted KV.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "kvserve/pool.h"
#include "kvserve/serve.h"
#include "pool/redis_cluster_test_util.h"
#include "serve/serve_test_util.h"

extern char** environ;

namespace kvserve {
namespace {

class ServeFaultTest : public servetest::OverTransports {};
class ServeProcessTest : public servetest::OverTransports {};
class ServeRedisTest : public servetest::OverTransports {};

using servetest::Reference;
using servetest::SmallModel;

// Streams from the first `faulty_connects` Connect calls go through
// `faulty`, later ones through `base`: a fault that happens once.
class FirstStreamsTransport final : public Transport {
 public:
  FirstStreamsTransport(Transport* faulty, Transport* base, int faulty_connects)
      : faulty_(faulty), base_(base), left_(faulty_connects) {}
  Result<std::unique_ptr<Stream>> Connect(const std::string& address, double timeout) override {
    if (left_-- > 0) return faulty_->Connect(address, timeout);
    return base_->Connect(address, timeout);
  }
  Result<std::unique_ptr<Listener>> Listen(const std::string& address) override {
    return base_->Listen(address);
  }

 private:
  Transport* faulty_;
  Transport* base_;
  std::atomic<int> left_;
};

ServeRequest LosslessRequest(std::mt19937_64& rng, uint64_t id, int min_tokens = 150,
                             int max_tokens = 300) {
  ServeRequest r;
  r.id = id;
  r.prompt = servetest::RandomPrompt(rng, min_tokens, max_tokens);
  r.max_new_tokens = 8;
  r.method = "none";
  r.sampling.seed = rng();
  return r;
}

// The property every fault test checks: completed with the right tokens,
// or failed with an error that says what happened.
void ExpectCorrectOrClearFailure(const ServeResponse& response, const ServeRequest& r) {
  if (response.status.ok()) {
    EXPECT_EQ(response.tokens, Reference(SmallModel(), r)) << "answered from wrong KV";
  } else {
    EXPECT_TRUE(response.tokens.empty());
    EXPECT_FALSE(response.status.message().empty());
  }
}

TEST_P(ServeFaultTest, DroppedConnectionIsRetriedOrFailsClearly) {
  std::mt19937_64 rng(11);
  for (int64_t drop_at : {int64_t{2000}, int64_t{60000}, int64_t{250000}}) {
    SCOPED_TRACE("drop after " + std::to_string(drop_at) + " bytes");
    auto tcp = transporttest::MakeTransport(GetParam());
    FaultInjectingTransport faulty(tcp.get());
    faulty.SetConnectPlan({.drop_after_bytes = drop_at});
    // Once: the retry on a fresh connection succeeds.
    FirstStreamsTransport once(&faulty, tcp.get(), 1);
    servetest::ClusterOptions o = servetest::Over(GetParam());
    o.prefill_transport = &once;
    auto cluster = servetest::StartCluster(o);
    ASSERT_TRUE(cluster);
    ServeRequest r = LosslessRequest(rng, 1);
    auto response = cluster->client->Submit(r);
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    ExpectCorrectOrClearFailure(*response, r);
    EXPECT_EQ(faulty.counters().drops, 1);
    EXPECT_EQ(response->timings.attempts, 2);

    // Always: the request fails, saying why and after how many attempts.
    servetest::ClusterOptions always = servetest::Over(GetParam());
    always.prefill_transport = &faulty;
    auto broken = servetest::StartCluster(always);
    ASSERT_TRUE(broken);
    response = broken->client->Submit(r);
    ASSERT_TRUE(response.ok());
    EXPECT_FALSE(response->status.ok());
    EXPECT_NE(response->status.message().find("attempts"), std::string::npos)
        << response->status.ToString();
    ExpectCorrectOrClearFailure(*response, r);
    EXPECT_EQ(broken->decode->completed(), 0);
  }
}

TEST_P(ServeFaultTest, CorruptedBytesOnTheWireAreNeverImported) {
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 4; ++trial) {
    auto tcp = transporttest::MakeTransport(GetParam());
    FaultInjectingTransport faulty(tcp.get());
    // Somewhere inside the frame (the handshake is a few hundred bytes).
    const int64_t at = 1000 + static_cast<int64_t>(rng() % 250000);
    SCOPED_TRACE("corrupt byte " + std::to_string(at));
    faulty.SetConnectPlan({.corrupt_byte_at = at});
    FirstStreamsTransport once(&faulty, tcp.get(), 1);
    servetest::ClusterOptions o = servetest::Over(GetParam());
    o.prefill_transport = &once;
    auto cluster = servetest::StartCluster(o);
    ASSERT_TRUE(cluster);
    ServeRequest r = LosslessRequest(rng, trial, 200, 300);  // >= 400 KiB of KV
    auto response = cluster->client->Submit(r);
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    ExpectCorrectOrClearFailure(*response, r);
    EXPECT_EQ(faulty.counters().corruptions, 1);
    EXPECT_EQ(response->timings.attempts, 2);

    servetest::ClusterOptions always = servetest::Over(GetParam());
    always.prefill_transport = &faulty;
    auto broken = servetest::StartCluster(always);
    ASSERT_TRUE(broken);
    response = broken->client->Submit(r);
    ASSERT_TRUE(response.ok());
    EXPECT_FALSE(response->status.ok());
    ExpectCorrectOrClearFailure(*response, r);
    EXPECT_EQ(broken->decode->completed(), 0);
  }
}

TEST_P(ServeFaultTest, SlowConsumerStillGetsTheRightKv) {
  std::mt19937_64 rng(13);
  auto tcp = transporttest::MakeTransport(GetParam());
  FaultInjectingTransport slow(tcp.get());
  slow.SetAcceptPlan({.read_delay_seconds = 0.0005, .max_read_bytes = 4096});
  servetest::ClusterOptions o = servetest::Over(GetParam());
  o.decode_transport = &slow;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  for (int i = 0; i < 2; ++i) {
    ServeRequest r = LosslessRequest(rng, i);
    auto response = cluster->client->Submit(r);
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    ExpectCorrectOrClearFailure(*response, r);
  }
}

TEST_P(ServeFaultTest, NoDecodeWorkerFailsClearly) {
  servetest::ClusterOptions o = servetest::Over(GetParam());
  o.start_decode = false;
  o.extra_decode_addresses = {"127.0.0.1:1"};  // nothing listens there
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(14);
  ServeRequest r = LosslessRequest(rng, 9);
  auto response = cluster->client->Submit(r);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->status.code(), StatusCode::kUnavailable) << response->status.ToString();
  EXPECT_NE(response->status.message().find("127.0.0.1:1"), std::string::npos)
      << response->status.ToString();
}

// A client that cannot reach its prefill worker gives up with what every
// submission ran into, not only the last.
TEST_P(ServeFaultTest, UnreachablePrefillWorkerFailsNamingEveryAttempt) {
  auto transport = transporttest::MakeTransport(GetParam());
  ServeClientOptions co;
  co.prefill_addresses = {"127.0.0.1:1"};  // nothing listens there
  co.connection = servetest::Options("client-secret", "router");
  co.max_attempts = 3;
  ServeClient client(transport.get(), co);
  std::mt19937_64 rng(18);
  auto response = client.Submit(LosslessRequest(rng, 6));
  ASSERT_TRUE(response.ok());
  const std::string m = response->status.ToString();
  EXPECT_FALSE(response->status.ok());
  EXPECT_NE(m.find("gave up after 3 submission(s)"), std::string::npos) << m;
  int connecting = 0;
  for (size_t at = m.find("127.0.0.1:1, connecting"); at != std::string::npos;
       at = m.find("127.0.0.1:1, connecting", at + 1))
    ++connecting;
  EXPECT_EQ(connecting, 3) << m;
}

TEST_P(ServeFaultTest, LostPrefillWorkerIsRePrefilledElsewhere) {
  auto first = servetest::StartCluster(servetest::Over(GetParam()));
  auto second = servetest::StartCluster(servetest::Over(GetParam()));
  ASSERT_TRUE(first && second);
  ServeClientOptions co;
  co.prefill_addresses = {first->prefill->address(), second->prefill->address()};
  co.connection = servetest::Options("client-secret", "router");
  ServeClient client(first->transport.get(), co);
  std::mt19937_64 rng(17);
  ServeRequest r = LosslessRequest(rng, 5, 20, 80);
  auto response = client.Submit(r);  // served by the first
  ASSERT_TRUE(response.ok() && response->status.ok());
  first->prefill->Stop();  // its connection and listener go away
  r = LosslessRequest(rng, 6, 20, 80);
  response = client.Submit(r);
  ASSERT_TRUE(response.ok());
  ASSERT_TRUE(response->status.ok()) << response->status.ToString();
  ExpectCorrectOrClearFailure(*response, r);
  EXPECT_EQ(second->decode->completed(), 1);
}

// --- Real processes -------------------------------------------------------

// Child role: a decode worker process on a free port; writes its address to
// KVSERVE_SERVE_ADDRESS_FILE and serves until killed (at most 60 s).
TEST(ServeRole, DecodeWorkerProcess) {
  const char* address_file = std::getenv("KVSERVE_SERVE_ADDRESS_FILE");
  if (address_file == nullptr) GTEST_SKIP() << "child role of ServeProcessTest";
  const char* kind = std::getenv("KVSERVE_SERVE_KIND");
  auto tcp = transporttest::MakeTransport(kind == nullptr ? transporttest::Kind::kTcp
                                                          : static_cast<transporttest::Kind>(
                                                                std::atoi(kind)));
  DecodeWorkerOptions d;
  d.connection = servetest::Options("pd-secret", "decode-child");
  auto worker = DecodeWorker::Start(tcp.get(), &SmallModel(), d);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  {
    std::ofstream out(std::string(address_file) + ".tmp");
    out << (*worker)->address() << "\n";
  }
  std::rename((std::string(address_file) + ".tmp").c_str(), address_file);
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

struct Child {
  pid_t pid = -1;
  std::string address;
  ~Child() { Kill(); }
  void Kill() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
};

bool SpawnDecodeChild(const std::string& dir, int index, transporttest::Kind kind, Child* child) {
  const std::string file = dir + "/decode" + std::to_string(index) + ".addr";
  child->pid = transporttest::SpawnSelf(
      "ServeRole.DecodeWorkerProcess",
      {"KVSERVE_SERVE_ADDRESS_FILE=" + file,
       "KVSERVE_SERVE_KIND=" + std::to_string(static_cast<int>(kind)),
       // The child is SIGKILLed and cannot clean up: its model directory
       // goes under `dir`, which the parent removes.
       "TMPDIR=" + dir});
  if (child->pid <= 0) return false;
  for (int i = 0; i < 400; ++i) {  // up to 20 s
    std::ifstream in(file);
    if (in >> child->address) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The first decode worker, a real process, is SIGKILLed when the prefill
// worker has written half of the frame to it (an exact byte offset of the
// stream, through the fault transport, not a guess with a sleep): the
// request fails over to the second worker on its second attempt and
// completes with exactly the single-process tokens; the next request goes
// straight to the survivor.
TEST_P(ServeProcessTest, DecodeWorkerKilledMidTransferFailsOver) {
  const std::string dir = servetest::TempDir("procs");
  Child first, second;
  ASSERT_TRUE(SpawnDecodeChild(dir, 0, GetParam(), &first));
  ASSERT_TRUE(SpawnDecodeChild(dir, 1, GetParam(), &second));
  std::mt19937_64 rng(15);
  ServeRequest r = LosslessRequest(rng, 77, 240, 300);
  const int64_t kv_bytes = int64_t{4} * 4 * 2 * 4 * 16 * static_cast<int64_t>(r.prompt.size());
  auto tcp = transporttest::MakeTransport(GetParam());
  FaultInjectingTransport faulty(tcp.get());
  pid_t killed = -1;
  faulty.SetConnectPlan({.event_after_bytes = kv_bytes / 2, .on_event = [&] {
                           killed = first.pid;
                           first.Kill();
                         }});
  FirstStreamsTransport once(&faulty, tcp.get(), 1);  // the first dial: to the first worker
  servetest::ClusterOptions o = servetest::Over(GetParam());
  o.start_decode = false;
  o.extra_decode_addresses = {first.address, second.address};
  o.prefill_transport = &once;
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  auto response = cluster->client->Submit(r);
  ASSERT_TRUE(response.ok());
  ASSERT_TRUE(response->status.ok()) << response->status.ToString();
  EXPECT_EQ(faulty.counters().events, 1) << "the kill did not happen mid-transfer";
  EXPECT_GT(killed, 0);
  EXPECT_EQ(response->timings.attempts, 2) << "no failover happened";
  ExpectCorrectOrClearFailure(*response, r);
  ServeRequest next = LosslessRequest(rng, 78, 20, 60);
  response = cluster->client->Submit(next);
  ASSERT_TRUE(response.ok());
  ASSERT_TRUE(response->status.ok()) << response->status.ToString();
  EXPECT_EQ(response->timings.attempts, 1);
  ExpectCorrectOrClearFailure(*response, next);
  std::filesystem::remove_all(dir);
}

// --- Redis ----------------------------------------------------------------

TEST_P(ServeRedisTest, RedisRestartedUnderThePoolEveryRequestCompletes) {
  if (std::system("command -v redis-server >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "redis-server not installed";
  const std::string script = std::string(KVSERVE_SOURCE_DIR) + "/scripts/start_redis.sh";
  const std::string dir = servetest::TempDir("redis");
  const std::string stop = script + " --stop --dir " + dir + " >/dev/null 2>&1";
  // A free port can be taken between picking it and redis binding it: the
  // script says so (exit 3) and another port is tried.
  int port = 0;
  std::string start;
  for (int attempt = 0; attempt < 10; ++attempt) {
    port = pooltest::FreePortBelowEphemeralRange();
    start = script + " --port " + std::to_string(port) + " --dir " + dir + " >/dev/null";
    if (std::system(start.c_str()) == 0) break;
    (void)std::system(stop.c_str());
    port = 0;
  }
  ASSERT_NE(port, 0) << "could not start redis on a free port";
  RedisPoolOptions ro;
  ro.port = port;
  ro.key_prefix = "kvserve-serve-test";
  ro.reconnect_attempts = 2;
  ro.connect_timeout_seconds = 0.3;
  ro.command_timeout_seconds = 5;
  auto connected = NewRedisPool(ro);  // the script returned once redis answered
  ASSERT_TRUE(connected.ok()) << connected.status().ToString();
  std::unique_ptr<KvPool> pool = std::move(*connected);
  servetest::ClusterOptions o = servetest::Over(GetParam());
  o.pool = pool.get();
  o.pool_store_profiles = {"none"};
  auto cluster = servetest::StartCluster(o);
  ASSERT_TRUE(cluster);
  std::mt19937_64 rng(16);
  ServeRequest r = LosslessRequest(rng, 1, 40, 120);
  r.use_pool = true;
  // expect_hit: 1 hit, 0 miss, -1 either.
  auto submit = [&](const char* phase, int expect_hit) {
    SCOPED_TRACE(phase);
    r.id++;
    auto response = cluster->client->Submit(r);
    ASSERT_TRUE(response.ok());
    ASSERT_TRUE(response->status.ok()) << response->status.ToString();
    EXPECT_EQ(response->tokens, Reference(SmallModel(), r));
    if (expect_hit >= 0) {
      EXPECT_EQ(response->timings.prefix_hit, expect_hit == 1);
    }
  };
  submit("first: a miss, stored", 0);
  submit("second: a hit", 1);
  ASSERT_EQ(std::system(stop.c_str()), 0);
  submit("redis down: recomputed", 0);
  ASSERT_EQ(std::system(start.c_str()), 0);
  // Without persistence the restarted Redis starts empty, but the store
  // queued by the request above may land once it is back: hit or miss.
  submit("redis back", -1);
  submit("stored by now: a hit", 1);
  (void)std::system(stop.c_str());
  std::filesystem::remove_all(dir);
}

KVSERVE_SERVE_OVER_TRANSPORTS(ServeFaultTest);
KVSERVE_SERVE_OVER_TRANSPORTS(ServeProcessTest);
KVSERVE_SERVE_OVER_TRANSPORTS(ServeRedisTest);

}  // namespace
}  // namespace kvserve
