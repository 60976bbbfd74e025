// Copyright kvserve authors. The Redis Cluster backend (hiredis).
//
// Keys (docs/transport.md §KV pool), T = {<model>:<hash>} the entry's hash
// tag, so every key of an entry lives in one slot:
//   <prefix>:v1:T:idx               hash: profile -> "<size> <pieces> <xxh3 hex>"
//   <prefix>:v1:T:kv:<profile>:<i>  piece i of the frame (binary string)
// Put is one MULTI/EXEC on the slot's master (pieces, stale pieces deleted,
// index); Get reads the index entry and the pieces inside MULTI/EXEC (one
// round trip for a frame of one piece) and checks size and checksum.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/checksum.h"
#include "kvserve/pool.h"
#include "pool/redis_cluster_slots.h"
#include "pool/redis_keys.h"

namespace kvserve {
namespace {

using pool::KeySlot;
using pool::RedisEscape;
using pool::RedisHex;

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;
// Arguments reference storage that outlives the call (keys, the caller's
// frame): a 32 MiB value is never copied into a command.
using Command = std::vector<std::string_view>;

// An entry's index value.
struct Meta {
  uint64_t size = 0;
  uint64_t pieces = 1;
  uint64_t checksum = 0;
};

std::string EncodeMeta(const Meta& m) {
  return std::to_string(m.size) + " " + std::to_string(m.pieces) + " " + RedisHex(m.checksum);
}

bool ParseMeta(const redisReply* r, Meta* m) {
  if (r == nullptr || r->type != REDIS_REPLY_STRING) return false;
  std::istringstream in(std::string(r->str, r->len));
  std::string checksum;
  if (!(in >> m->size >> m->pieces >> checksum) || m->pieces < 1 || checksum.size() != 16)
    return false;
  m->checksum = std::strtoull(checksum.c_str(), nullptr, 16);
  return true;
}

bool StartsWith(const redisReply* r, std::string_view prefix) {
  return r->type == REDIS_REPLY_ERROR && std::string_view(r->str, r->len).substr(0, prefix.size()) == prefix;
}

class RedisClusterPool final : public KvPool {
 public:
  explicit RedisClusterPool(RedisClusterPoolOptions options) : options_(std::move(options)) {
    std::string seeds;
    for (const auto& s : options_.seeds) seeds += (seeds.empty() ? "" : ",") + s;
    where_ = "redis cluster (seeds " + seeds + ")";
  }
  ~RedisClusterPool() override {
    for (auto& [address, ctx] : nodes_) redisFree(ctx);
  }

  Status Init() {
    std::lock_guard<std::mutex> lock(mu_);
    return RefreshSlots();
  }

  Status Put(const PoolKey& key, std::span<const uint8_t> frame) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    if (frame.size() > options_.max_value_bytes)
      return Status::ResourceExhausted("value of " + std::to_string(frame.size()) +
                                       " bytes exceeds the cluster pool's limit of " +
                                       std::to_string(options_.max_value_bytes));
    Meta meta;
    meta.size = frame.size();
    meta.pieces = std::max<uint64_t>(1, (frame.size() + options_.max_piece_bytes - 1) /
                                            options_.max_piece_bytes);
    meta.checksum = Checksum64(frame.data(), frame.size());
    const std::string index = IndexKey(key.model_id, key.prefix_hash);
    const std::string encoded = EncodeMeta(meta);
    const int slot = KeySlot(index);
    std::lock_guard<std::mutex> lock(mu_);
    // The old entry's piece count, to delete pieces the new one lacks.
    KVSERVE_ASSIGN_OR_RETURN(auto old, Run(slot, {{"HGET", index, key.profile}}));
    Meta previous;
    const uint64_t old_pieces = ParseMeta(old[0].get(), &previous) ? previous.pieces : 0;
    std::vector<std::string> keys;
    for (uint64_t i = 0; i < std::max(meta.pieces, old_pieces); ++i) keys.push_back(PieceKey(key, i));
    std::vector<Command> commands = {{"MULTI"}};
    const std::string_view bytes(reinterpret_cast<const char*>(frame.data()), frame.size());
    for (uint64_t i = 0; i < meta.pieces; ++i)
      commands.push_back({"SET", keys[i], bytes.substr(i * options_.max_piece_bytes,
                                                        options_.max_piece_bytes)});
    for (uint64_t i = meta.pieces; i < old_pieces; ++i) commands.push_back({"DEL", keys[i]});
    commands.push_back({"HSET", index, key.profile, encoded});
    commands.push_back({"EXEC"});
    KVSERVE_ASSIGN_OR_RETURN(auto replies, Run(slot, commands));
    return ExecResult(replies.back().get(), "PUT").status();
  }

  Status Get(const PoolKey& key, std::vector<uint8_t>* frame) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    std::lock_guard<std::mutex> lock(mu_);
    Status s = GetLocked(key, frame);
    if (s.ok()) ++hits_;
    if (s.code() == StatusCode::kNotFound) ++misses_;
    return s;
  }

  // One pipeline per node, sent to every node before any reply is read;
  // keys whose node failed (or was redirected) fall back to Get's path.
  std::vector<Status> GetMany(std::span<const PoolKey> keys,
                              std::vector<std::vector<uint8_t>>* frames) override {
    frames->assign(keys.size(), {});
    std::vector<Status> statuses(keys.size(), Status::Internal("not fetched"));
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, std::vector<size_t>> by_node;
    std::vector<std::string> index(keys.size()), first(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      statuses[i] = ValidatePoolKey(keys[i]);
      if (!statuses[i].ok()) continue;
      index[i] = IndexKey(keys[i].model_id, keys[i].prefix_hash);
      first[i] = PieceKey(keys[i], 0);
      by_node[slots_.master[KeySlot(index[i])]].push_back(i);
    }
    std::vector<std::pair<std::string, redisContext*>> sent;
    for (auto& [node, members] : by_node) {
      auto ctx = node.empty() ? Result<redisContext*>(Status::Unavailable("no master"))
                              : Node(node);
      if (!ctx.ok()) continue;  // these keys take the fallback below
      bool ok = true;
      for (size_t i : members)
        for (const Command& c : ReadCommands(index[i], keys[i].profile, first[i]))
          ok = ok && Append(*ctx, c);
      int done = 0;
      while (ok && !done) ok = redisBufferWrite(*ctx, &done) == REDIS_OK;
      if (!ok) {
        DropNode(node);
        continue;
      }
      sent.emplace_back(node, *ctx);
    }
    // Every pipelined reply is read before any follow-up command (a frame's
    // further pieces) reuses a connection.
    std::vector<ReplyPtr> execs(keys.size());
    for (auto& [node, ctx] : sent) {
      for (size_t i : by_node[node]) {
        bool ok = true;
        for (int k = 0; k < 4 && ok; ++k) {
          void* raw = nullptr;
          ok = redisGetReply(ctx, &raw) == REDIS_OK && raw != nullptr;
          if (ok) execs[i].reset(static_cast<redisReply*>(raw));  // keeps EXEC's, the last
        }
        if (!ok) {
          execs[i].reset();
          DropNode(node);
          break;  // the rest of this node's keys take the fallback
        }
      }
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!execs[i]) continue;
      auto exec = ExecResult(execs[i].get(), "GET");
      if (!exec.ok()) continue;  // e.g. MOVED: fallback
      statuses[i] = FinishGet(keys[i], *exec, &(*frames)[i]);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (statuses[i].code() == StatusCode::kInternal) statuses[i] = GetLocked(keys[i], &(*frames)[i]);
      if (statuses[i].ok()) ++hits_;
      if (statuses[i].code() == StatusCode::kNotFound) ++misses_;
    }
    return statuses;
  }

  Status Delete(const PoolKey& key) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    const std::string index = IndexKey(key.model_id, key.prefix_hash);
    const int slot = KeySlot(index);
    std::lock_guard<std::mutex> lock(mu_);
    KVSERVE_ASSIGN_OR_RETURN(auto old, Run(slot, {{"HGET", index, key.profile}}));
    Meta meta;
    if (!ParseMeta(old[0].get(), &meta)) return Status::NotFound("pool: no entry to delete");
    std::vector<std::string> keys;
    for (uint64_t i = 0; i < meta.pieces; ++i) keys.push_back(PieceKey(key, i));
    std::vector<Command> commands = {{"MULTI"}};
    for (const auto& k : keys) commands.push_back({"DEL", k});
    commands.push_back({"HDEL", index, key.profile});
    commands.push_back({"EXEC"});
    KVSERVE_ASSIGN_OR_RETURN(auto replies, Run(slot, commands));
    KVSERVE_ASSIGN_OR_RETURN(const redisReply* exec, ExecResult(replies.back().get(), "DELETE"));
    const redisReply* hdel = exec->element[exec->elements - 1];
    if (hdel->type != REDIS_REPLY_INTEGER || hdel->integer == 0)
      return Status::NotFound("pool: no entry to delete");
    return Status::Ok();
  }

  Result<std::vector<PoolEntryInfo>> Lookup(std::string_view model_id,
                                            uint64_t prefix_hash) override {
    if (model_id.empty() || model_id.size() > kMaxPoolModelIdBytes)
      return Status::InvalidArgument("pool lookup: bad model id length");
    const std::string index = IndexKey(model_id, prefix_hash);
    std::lock_guard<std::mutex> lock(mu_);
    KVSERVE_ASSIGN_OR_RETURN(auto replies, Run(KeySlot(index), {{"HGETALL", index}}));
    const redisReply* r = replies[0].get();
    if (r->type != REDIS_REPLY_ARRAY) return ReplyError(r, "HGETALL");
    std::vector<PoolEntryInfo> out;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
      Meta meta;
      if (!ParseMeta(r->element[i + 1], &meta)) continue;
      out.push_back({std::string(r->element[i]->str, r->element[i]->len), meta.size});
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.profile < b.profile; });
    return out;
  }

  // SCANs the index hashes of every master (O(keys): for tools).
  Result<PoolStats> Stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    PoolStats stats;
    std::map<std::string, int> masters;  // master -> a slot it serves
    for (int s = 0; s < pool::kRedisClusterSlots; ++s)
      if (!slots_.master[s].empty()) masters.emplace(slots_.master[s], s);
    const std::string pattern = options_.key_prefix + ":v1:*:idx";
    for (const auto& [node, slot] : masters) {
      std::string cursor = "0";
      do {
        KVSERVE_ASSIGN_OR_RETURN(
            auto replies, Pipeline(node, {{"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}}, false));
        const redisReply* r = replies[0].get();
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) return ReplyError(r, "SCAN");
        cursor.assign(r->element[0]->str, r->element[0]->len);
        for (size_t i = 0; i < r->element[1]->elements; ++i) {
          const redisReply* k = r->element[1]->element[i];
          const std::string index(k->str, k->len);
          KVSERVE_ASSIGN_OR_RETURN(auto vals, Pipeline(node, {{"HVALS", index}}, false));
          if (vals[0]->type != REDIS_REPLY_ARRAY) continue;
          for (size_t j = 0; j < vals[0]->elements; ++j) {
            Meta meta;
            if (!ParseMeta(vals[0]->element[j], &meta)) continue;
            ++stats.entries;
            stats.bytes += meta.size;
          }
        }
      } while (cursor != "0");
    }
    stats.hits = hits_;
    stats.misses = misses_;
    return stats;
  }

 private:
  std::string Tag(std::string_view model_id, uint64_t prefix_hash) const {
    return "{" + RedisEscape(model_id, true) + ":" + RedisHex(prefix_hash) + "}";
  }
  std::string IndexKey(std::string_view model_id, uint64_t prefix_hash) const {
    return options_.key_prefix + ":v1:" + Tag(model_id, prefix_hash) + ":idx";
  }
  std::string PieceKey(const PoolKey& key, uint64_t piece) const {
    return options_.key_prefix + ":v1:" + Tag(key.model_id, key.prefix_hash) + ":kv:" +
           RedisEscape(key.profile, true) + ":" + std::to_string(piece);
  }

  // The transaction that reads an entry's index value and first piece.
  static std::vector<Command> ReadCommands(const std::string& index, const std::string& profile,
                                           const std::string& first_piece) {
    return {{"MULTI"}, {"HGET", index, profile}, {"GET", first_piece}, {"EXEC"}};
  }

  Status GetLocked(const PoolKey& key, std::vector<uint8_t>* frame) {
    const std::string index = IndexKey(key.model_id, key.prefix_hash);
    const std::string first = PieceKey(key, 0);
    KVSERVE_ASSIGN_OR_RETURN(auto replies, Run(KeySlot(index), ReadCommands(index, key.profile, first)));
    KVSERVE_ASSIGN_OR_RETURN(const redisReply* exec, ExecResult(replies.back().get(), "GET"));
    return FinishGet(key, exec, frame);
  }

  // From EXEC's [index value, first piece]: the frame, fetching the other
  // pieces (with the index value again, in one transaction) when there are
  // more, and verifying size and checksum.
  Status FinishGet(const PoolKey& key, const redisReply* exec, std::vector<uint8_t>* frame) {
    if (exec->elements != 2) return Status::Corruption(where_ + ": unexpected GET reply");
    Meta meta;
    if (exec->element[0]->type == REDIS_REPLY_NIL)
      return Status::NotFound("pool: no entry for this prefix and profile");
    if (!ParseMeta(exec->element[0], &meta))
      return Status::Corruption(where_ + ": malformed index entry");
    const redisReply* piece = exec->element[1];
    if (piece->type != REDIS_REPLY_STRING)
      return Status::NotFound("pool: the entry's frame is gone (lost in a failover or evicted)");
    frame->assign(reinterpret_cast<const uint8_t*>(piece->str),
                  reinterpret_cast<const uint8_t*>(piece->str) + piece->len);
    if (meta.pieces > 1) {
      const std::string index = IndexKey(key.model_id, key.prefix_hash);
      std::vector<std::string> keys;
      for (uint64_t i = 1; i < meta.pieces; ++i) keys.push_back(PieceKey(key, i));
      std::vector<Command> commands = {{"MULTI"}, {"HGET", index, key.profile}};
      for (const auto& k : keys) commands.push_back({"GET", k});
      commands.push_back({"EXEC"});
      KVSERVE_ASSIGN_OR_RETURN(auto replies, Run(KeySlot(index), commands));
      KVSERVE_ASSIGN_OR_RETURN(const redisReply* rest, ExecResult(replies.back().get(), "GET"));
      Meta again;
      if (rest->elements != meta.pieces || !ParseMeta(rest->element[0], &again) ||
          again.checksum != meta.checksum)
        return Status::NotFound("pool: the entry changed while it was read");
      for (size_t i = 1; i < rest->elements; ++i) {
        const redisReply* p = rest->element[i];
        if (p->type != REDIS_REPLY_STRING)
          return Status::NotFound("pool: a piece of the entry's frame is gone");
        frame->insert(frame->end(), reinterpret_cast<const uint8_t*>(p->str),
                      reinterpret_cast<const uint8_t*>(p->str) + p->len);
      }
    }
    if (frame->size() != meta.size || Checksum64(frame->data(), frame->size()) != meta.checksum) {
      frame->clear();
      return Status::Corruption(where_ + ": stored frame fails its size or checksum");
    }
    return Status::Ok();
  }

  // EXEC's reply array, or the error that aborted the transaction.
  Result<const redisReply*> ExecResult(const redisReply* exec, std::string_view what) const {
    if (exec->type == REDIS_REPLY_ARRAY) return exec;
    return ReplyError(exec, what);
  }

  Status ReplyError(const redisReply* r, std::string_view what) const {
    if (r->type == REDIS_REPLY_ERROR)
      return Status::IOError(where_ + ": " + std::string(what) + ": " + std::string(r->str, r->len));
    if (r->type == REDIS_REPLY_NIL)
      return Status::Unavailable(where_ + ": " + std::string(what) + ": transaction aborted");
    return Status::Corruption(where_ + ": unexpected reply type to " + std::string(what));
  }

  static bool Append(redisContext* ctx, const Command& c) {
    std::vector<const char*> argv;
    std::vector<size_t> argvlen;
    for (const auto& a : c) {
      argv.push_back(a.data());
      argvlen.push_back(a.size());
    }
    return redisAppendCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(),
                                  argvlen.data()) == REDIS_OK;
  }

  static timeval ToTimeval(double seconds) {
    timeval tv;
    tv.tv_sec = static_cast<long>(seconds);
    tv.tv_usec = static_cast<long>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
    return tv;
  }

  Result<redisContext*> Node(const std::string& address) {
    auto it = nodes_.find(address);
    if (it != nodes_.end()) return it->second;
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return Status::InvalidArgument("bad node address " + address);
    const std::string host = address.substr(0, colon);
    const int port = std::atoi(address.c_str() + colon + 1);
    redisContext* c = redisConnectWithTimeout(host.c_str(), port,
                                              ToTimeval(options_.connect_timeout_seconds));
    if (c == nullptr) return Status::Unavailable(where_ + ": node " + address + ": no context");
    if (c->err) {
      Status s = Status::Unavailable(where_ + ": node " + address + ": " + c->errstr);
      redisFree(c);
      return s;
    }
    redisSetTimeout(c, ToTimeval(options_.command_timeout_seconds));
    nodes_[address] = c;
    if (!options_.password.empty()) {
      auto r = Pipeline(address, {{"AUTH", options_.password}}, false);
      if (!r.ok()) return r.status();
      if ((*r)[0]->type == REDIS_REPLY_ERROR)
        return Status::PermissionDenied(where_ + ": node " + address + ": AUTH failed");
    }
    return c;
  }

  void DropNode(const std::string& address) {
    auto it = nodes_.find(address);
    if (it == nodes_.end()) return;
    redisFree(it->second);
    nodes_.erase(it);
  }

  // One attempt: `commands` pipelined on `address` (after ASKING when
  // `asking`); Unavailable (connection dropped) on a connection error.
  Result<std::vector<ReplyPtr>> Pipeline(const std::string& address,
                                         const std::vector<Command>& commands, bool asking) {
    KVSERVE_ASSIGN_OR_RETURN(redisContext * ctx, Node(address));
    bool ok = !asking || Append(ctx, {"ASKING"});
    for (const Command& c : commands) ok = ok && Append(ctx, c);
    std::vector<ReplyPtr> replies;
    const size_t expected = commands.size() + (asking ? 1 : 0);
    while (ok && replies.size() < expected) {
      void* raw = nullptr;
      ok = redisGetReply(ctx, &raw) == REDIS_OK && raw != nullptr;
      if (ok) replies.emplace_back(static_cast<redisReply*>(raw));
    }
    if (!ok) {
      const std::string why = ctx->err ? ctx->errstr : "connection lost";
      DropNode(address);
      return Status::Unavailable(where_ + ": node " + address + ": " + why);
    }
    if (asking) replies.erase(replies.begin());
    return replies;
  }

  // `commands` on the master of `slot`: follows MOVED (refreshing the slot
  // map) and ASK, retries connection errors and cluster-down answers.
  Result<std::vector<ReplyPtr>> Run(int slot, const std::vector<Command>& commands) {
    Status last = Status::Unavailable(where_ + ": no attempt made");
    double backoff = 0.1;
    for (int attempt = 0; attempt <= options_.retry_attempts; ++attempt) {
      if (attempt > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
        backoff = std::min(1.0, backoff * 2);
        (void)RefreshSlots();
      }
      std::string node = slots_.master[slot];
      if (node.empty()) {
        last = Status::Unavailable(where_ + ": no master serves slot " + std::to_string(slot));
        continue;
      }
      bool asking = false;
      bool retry = false;
      for (int redirect = 0; redirect <= options_.max_redirects && !retry; ++redirect) {
        auto replies = Pipeline(node, commands, asking);
        if (!replies.ok()) {
          last = replies.status();
          break;
        }
        std::string moved, ask;
        for (const ReplyPtr& r : *replies) {
          std::string_view msg = r->type == REDIS_REPLY_ERROR ? std::string_view(r->str, r->len)
                                                              : std::string_view();
          if (StartsWith(r.get(), "MOVED ")) moved = std::string(msg.substr(msg.rfind(' ') + 1));
          if (StartsWith(r.get(), "ASK ")) ask = std::string(msg.substr(msg.rfind(' ') + 1));
          if (StartsWith(r.get(), "TRYAGAIN") || StartsWith(r.get(), "CLUSTERDOWN") ||
              StartsWith(r.get(), "MASTERDOWN") || StartsWith(r.get(), "LOADING")) {
            last = Status::Unavailable(where_ + ": node " + node + ": " + std::string(msg));
            retry = true;
          }
          if (!moved.empty() || !ask.empty() || retry) break;
        }
        if (retry) break;
        if (!moved.empty()) {
          slots_.master[slot] = moved;
          (void)RefreshSlots();
          node = slots_.master[slot].empty() ? moved : slots_.master[slot];
          asking = false;
          last = Status::Unavailable(where_ + ": redirected to " + moved);
          continue;
        }
        if (!ask.empty()) {
          node = ask;
          asking = true;
          last = Status::Unavailable(where_ + ": asked to try " + ask);
          continue;
        }
        return std::move(*replies);
      }
    }
    return Status::Unavailable(last.message() + " (gave up after " +
                               std::to_string(options_.retry_attempts + 1) + " attempts)");
  }

  // Reads CLUSTER SLOTS from a known master or a seed.
  Status RefreshSlots() {
    std::vector<std::string> candidates;
    for (const auto& m : slots_.master)
      if (!m.empty() && std::find(candidates.begin(), candidates.end(), m) == candidates.end())
        candidates.push_back(m);
    for (const auto& s : options_.seeds)
      if (std::find(candidates.begin(), candidates.end(), s) == candidates.end())
        candidates.push_back(s);
    Status last = Status::Unavailable(where_ + ": no node to ask for the slot map");
    for (const auto& node : candidates) {
      auto replies = Pipeline(node, {{"CLUSTER", "SLOTS"}}, false);
      if (!replies.ok()) {
        last = replies.status();
        continue;
      }
      if (slots_.Parse((*replies)[0].get(), node)) return Status::Ok();
      last = Status::Corruption(where_ + ": node " + node + " sent a malformed CLUSTER SLOTS reply");
    }
    return last;
  }

  const RedisClusterPoolOptions options_;
  std::string where_;
  std::mutex mu_;  // guards everything below
  pool::SlotMap slots_;
  std::map<std::string, redisContext*> nodes_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace

Result<std::unique_ptr<KvPool>> NewRedisClusterPool(RedisClusterPoolOptions options) {
  if (options.seeds.empty()) return Status::InvalidArgument("redis cluster pool needs a seed node");
  if (options.key_prefix.empty() || options.key_prefix.find(':') != std::string::npos)
    return Status::InvalidArgument("redis key prefix must be non-empty and contain no ':'");
  if (options.max_piece_bytes < 1024)
    return Status::InvalidArgument("max_piece_bytes must be at least 1 KiB");
  if (options.retry_attempts < 0 || options.max_redirects < 0)
    return Status::InvalidArgument("retry_attempts and max_redirects must be >= 0");
  auto pool = std::make_unique<RedisClusterPool>(std::move(options));
  KVSERVE_RETURN_IF_ERROR(pool->Init());
  return std::unique_ptr<KvPool>(std::move(pool));
}

}  // namespace kvserve
