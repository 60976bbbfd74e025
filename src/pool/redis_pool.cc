// Copyright kvserve authors. The Redis backend (hiredis).
//
// Keys (docs/transport.md §KV pool):
//   <prefix>:v1:kv:<model>:<hash>:<profile>   the frame (binary string)
//   <prefix>:v1:idx:<model>:<hash>            hash: profile -> size in bytes
// <model> and <profile> are percent-escaped ('%', ':', bytes outside
// 0x21..0x7e) so the separator is unambiguous; <hash> is 16 lower-case hex
// digits. Put and Delete update both keys in one MULTI/EXEC transaction.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/pool.h"
#include "pool/redis_keys.h"

namespace kvserve {
namespace {

using pool::RedisEscape;
using pool::RedisHex;

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisPool final : public KvPool {
 public:
  explicit RedisPool(RedisPoolOptions options)
      : options_(std::move(options)),
        where_("redis at " + options_.host + ":" + std::to_string(options_.port)) {}
  ~RedisPool() override {
    if (ctx_) redisFree(ctx_);
  }

  Status Connect() {
    if (ctx_) {
      redisFree(ctx_);
      ctx_ = nullptr;
    }
    timeval tv = ToTimeval(options_.connect_timeout_seconds);
    redisContext* c = redisConnectWithTimeout(options_.host.c_str(), options_.port, tv);
    if (c == nullptr) return Status::Unavailable(where_ + ": cannot allocate a context");
    if (c->err) {
      Status s = Status::Unavailable(where_ + ": " + c->errstr);
      redisFree(c);
      return s;
    }
    timeval ctv = ToTimeval(options_.command_timeout_seconds);
    redisSetTimeout(c, ctv);
    ctx_ = c;
    if (!options_.password.empty()) {
      auto r = Command({"AUTH", options_.password});
      if (!r.ok()) return r.status();
      if ((*r)->type == REDIS_REPLY_ERROR)
        return Status::PermissionDenied(where_ + ": AUTH failed: " + (*r)->str);
    }
    if (options_.database != 0) {
      auto r = Command({"SELECT", std::to_string(options_.database)});
      if (!r.ok()) return r.status();
      if ((*r)->type == REDIS_REPLY_ERROR)
        return Status::InvalidArgument(where_ + ": SELECT failed: " + (*r)->str);
    }
    return Status::Ok();
  }

  Status Put(const PoolKey& key, std::span<const uint8_t> frame) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    if (frame.size() > options_.max_value_bytes)
      return Status::ResourceExhausted("value of " + std::to_string(frame.size()) +
                                       " bytes exceeds the Redis value limit");
    std::string value(reinterpret_cast<const char*>(frame.data()), frame.size());
    std::lock_guard<std::mutex> lock(mu_);
    return WithRetry([&]() -> Status {
      KVSERVE_ASSIGN_OR_RETURN(auto replies,
                               Transaction({{"SET", DataKey(key), value},
                                            {"HSET", IndexKey(key.model_id, key.prefix_hash),
                                             key.profile, std::to_string(frame.size())}}));
      (void)replies;
      return Status::Ok();
    });
  }

  Status Get(const PoolKey& key, std::vector<uint8_t>* frame) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    std::lock_guard<std::mutex> lock(mu_);
    return WithRetry([&]() -> Status {
      KVSERVE_ASSIGN_OR_RETURN(ReplyPtr r, Command({"GET", DataKey(key)}));
      if (r->type == REDIS_REPLY_NIL) {
        ++misses_;
        return Status::NotFound("pool: no entry for this prefix and profile");
      }
      if (r->type != REDIS_REPLY_STRING) return ReplyError(r.get(), "GET");
      ++hits_;
      frame->assign(reinterpret_cast<const uint8_t*>(r->str),
                    reinterpret_cast<const uint8_t*>(r->str) + r->len);
      return Status::Ok();
    });
  }

  Status Delete(const PoolKey& key) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    std::lock_guard<std::mutex> lock(mu_);
    return WithRetry([&]() -> Status {
      KVSERVE_ASSIGN_OR_RETURN(
          ReplyPtr exec,
          Transaction({{"DEL", DataKey(key)},
                       {"HDEL", IndexKey(key.model_id, key.prefix_hash), key.profile}}));
      if (exec->elements < 1 || exec->element[0]->type != REDIS_REPLY_INTEGER)
        return Status::Corruption(where_ + ": unexpected DEL reply");
      if (exec->element[0]->integer == 0) return Status::NotFound("pool: no entry to delete");
      return Status::Ok();
    });
  }

  Result<std::vector<PoolEntryInfo>> Lookup(std::string_view model_id,
                                            uint64_t prefix_hash) override {
    if (model_id.empty() || model_id.size() > kMaxPoolModelIdBytes)
      return Status::InvalidArgument("pool lookup: bad model id length");
    std::vector<PoolEntryInfo> out;
    std::lock_guard<std::mutex> lock(mu_);
    KVSERVE_RETURN_IF_ERROR(WithRetry([&]() -> Status {
      out.clear();
      KVSERVE_ASSIGN_OR_RETURN(ReplyPtr r, Command({"HGETALL", IndexKey(model_id, prefix_hash)}));
      if (r->type != REDIS_REPLY_ARRAY) return ReplyError(r.get(), "HGETALL");
      for (size_t i = 0; i + 1 < r->elements; i += 2) {
        PoolEntryInfo e;
        e.profile.assign(r->element[i]->str, r->element[i]->len);
        e.bytes = std::strtoull(std::string(r->element[i + 1]->str, r->element[i + 1]->len).c_str(),
                                nullptr, 10);
        out.push_back(std::move(e));
      }
      return Status::Ok();
    }));
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.profile < b.profile; });
    return out;
  }

  Result<PoolStats> Stats() override {
    PoolStats stats;
    std::lock_guard<std::mutex> lock(mu_);
    KVSERVE_RETURN_IF_ERROR(WithRetry([&]() -> Status {
      stats = PoolStats{};
      std::string cursor = "0";
      // SCAN the index hashes of our namespace (bounded by the key count).
      for (int rounds = 0; rounds < 1000000; ++rounds) {
        KVSERVE_ASSIGN_OR_RETURN(
            ReplyPtr r, Command({"SCAN", cursor, "MATCH", options_.key_prefix + ":v1:idx:*",
                                 "COUNT", "1000"}));
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) return ReplyError(r.get(), "SCAN");
        cursor.assign(r->element[0]->str, r->element[0]->len);
        for (size_t i = 0; i < r->element[1]->elements; ++i) {
          const redisReply* k = r->element[1]->element[i];
          KVSERVE_ASSIGN_OR_RETURN(ReplyPtr vals, Command({"HVALS", std::string(k->str, k->len)}));
          if (vals->type != REDIS_REPLY_ARRAY) continue;
          for (size_t j = 0; j < vals->elements; ++j) {
            ++stats.entries;
            stats.bytes += std::strtoull(vals->element[j]->str, nullptr, 10);
          }
        }
        if (cursor == "0") break;
      }
      return Status::Ok();
    }));
    stats.hits = hits_;
    stats.misses = misses_;
    return stats;
  }

 private:
  static timeval ToTimeval(double seconds) {
    timeval tv;
    tv.tv_sec = static_cast<long>(seconds);
    tv.tv_usec = static_cast<long>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
    return tv;
  }

  std::string DataKey(const PoolKey& key) const {
    return options_.key_prefix + ":v1:kv:" + RedisEscape(key.model_id) + ":" + RedisHex(key.prefix_hash) +
           ":" + RedisEscape(key.profile);
  }
  std::string IndexKey(std::string_view model_id, uint64_t prefix_hash) const {
    return options_.key_prefix + ":v1:idx:" + RedisEscape(model_id) + ":" + RedisHex(prefix_hash);
  }

  Status ReplyError(const redisReply* r, std::string_view command) const {
    if (r->type == REDIS_REPLY_ERROR) {
      std::string m(r->str, r->len);
      // A restarted Redis answers LOADING while it reads its AOF/RDB.
      if (m.rfind("LOADING", 0) == 0) return Status::Unavailable(where_ + ": " + m);
      return Status::IOError(where_ + ": " + std::string(command) + ": " + m);
    }
    return Status::Corruption(where_ + ": unexpected reply type to " + std::string(command));
  }

  // One command; Unavailable (and the context dropped) on a connection
  // error.
  Result<ReplyPtr> Command(std::vector<std::string> args) {
    if (ctx_ == nullptr) return Status::Unavailable(where_ + ": not connected");
    std::vector<const char*> argv;
    std::vector<size_t> argvlen;
    for (const auto& a : args) {
      argv.push_back(a.data());
      argvlen.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), argvlen.data()));
    if (r == nullptr) return Dropped();
    return ReplyPtr(r);
  }

  // MULTI, the commands, EXEC, pipelined; returns EXEC's reply.
  Result<ReplyPtr> Transaction(std::vector<std::vector<std::string>> commands) {
    if (ctx_ == nullptr) return Status::Unavailable(where_ + ": not connected");
    commands.insert(commands.begin(), {"MULTI"});
    commands.push_back({"EXEC"});
    for (const auto& args : commands) {
      std::vector<const char*> argv;
      std::vector<size_t> argvlen;
      for (const auto& a : args) {
        argv.push_back(a.data());
        argvlen.push_back(a.size());
      }
      if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(),
                                 argvlen.data()) != REDIS_OK)
        return Dropped();
    }
    ReplyPtr last;
    Status error;
    for (size_t i = 0; i < commands.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) return Dropped();
      ReplyPtr r(static_cast<redisReply*>(raw));
      if (r->type == REDIS_REPLY_ERROR && error.ok()) error = ReplyError(r.get(), args0(commands[i]));
      last = std::move(r);
    }
    KVSERVE_RETURN_IF_ERROR(error);
    if (last->type != REDIS_REPLY_ARRAY) return ReplyError(last.get(), "EXEC");
    return last;
  }
  static std::string args0(const std::vector<std::string>& a) { return a.empty() ? "" : a[0]; }

  Status Dropped() {
    std::string why = ctx_ && ctx_->err ? ctx_->errstr : "connection lost";
    redisFree(ctx_);
    ctx_ = nullptr;
    return Status::Unavailable(where_ + ": " + why);
  }

  // Runs `op`, reconnecting with back-off while it fails with Unavailable.
  template <typename Op>
  Status WithRetry(Op op) {
    Status last;
    double backoff = 0.1;
    for (int attempt = 0; attempt <= options_.reconnect_attempts; ++attempt) {
      if (attempt > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
        backoff = std::min(1.0, backoff * 2);
      }
      if (ctx_ == nullptr) {
        last = Connect();
        if (!last.ok()) {
          if (last.code() != StatusCode::kUnavailable) return last;
          continue;
        }
      }
      last = op();
      if (last.code() != StatusCode::kUnavailable) return last;
    }
    return Status::Unavailable(last.message() + " (gave up after " +
                               std::to_string(options_.reconnect_attempts + 1) + " attempts)");
  }

  const RedisPoolOptions options_;
  const std::string where_;
  std::mutex mu_;
  redisContext* ctx_ = nullptr;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace

Result<std::unique_ptr<KvPool>> NewRedisPool(RedisPoolOptions options) {
  if (options.key_prefix.empty() || options.key_prefix.find(':') != std::string::npos)
    return Status::InvalidArgument("redis key prefix must be non-empty and contain no ':'");
  if (options.port <= 0 || options.port > 65535)
    return Status::InvalidArgument("redis port out of range");
  auto pool = std::make_unique<RedisPool>(std::move(options));
  KVSERVE_RETURN_IF_ERROR(pool->Connect());
  return std::unique_ptr<KvPool>(std::move(pool));
}

}  // namespace kvserve
