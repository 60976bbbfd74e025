// Copyright kvserve authors. The embedded pool: a hash map of values with an
// LRU list and a per-prefix index of profiles, under one mutex.
#include <algorithm>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "kvserve/pool.h"

namespace kvserve {
namespace {

struct KeyHash {
  size_t operator()(const PoolKey& k) const {
    size_t h = std::hash<std::string>()(k.model_id);
    h ^= std::hash<uint64_t>()(k.prefix_hash) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= std::hash<std::string>()(k.profile) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
  }
};

class MemoryPool final : public KvPool {
 public:
  explicit MemoryPool(MemoryPoolOptions options) : options_(options) {}

  Status Put(const PoolKey& key, std::span<const uint8_t> frame) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    if (frame.size() > options_.budget_bytes)
      return Status::ResourceExhausted("value of " + std::to_string(frame.size()) +
                                       " bytes exceeds the pool budget of " +
                                       std::to_string(options_.budget_bytes));
    // Copied outside the lock; shared so that GetShared hands it out as is.
    auto value = std::make_shared<const std::vector<uint8_t>>(frame.begin(), frame.end());
    std::lock_guard<std::mutex> lock(mu_);
    EraseLocked(key);
    while (stats_.bytes + value->size() > options_.budget_bytes && !lru_.empty()) {
      EraseLocked(lru_.back());
      ++stats_.evictions;
    }
    lru_.push_front(key);
    stats_.bytes += value->size();
    index_[{key.model_id, key.prefix_hash}][key.profile] = value->size();
    map_.emplace(key, Entry{std::move(value), lru_.begin()});
    stats_.entries = map_.size();
    return Status::Ok();
  }

  Status Get(const PoolKey& key, std::vector<uint8_t>* frame) override {
    KVSERVE_ASSIGN_OR_RETURN(auto value, GetShared(key));
    frame->assign(value->begin(), value->end());  // outside the lock
    return Status::Ok();
  }

  Result<std::shared_ptr<const std::vector<uint8_t>>> GetShared(const PoolKey& key) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      ++stats_.misses;
      return Status::NotFound("pool: no entry for this prefix and profile");
    }
    ++stats_.hits;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.value;
  }

  Status Delete(const PoolKey& key) override {
    KVSERVE_RETURN_IF_ERROR(ValidatePoolKey(key));
    std::lock_guard<std::mutex> lock(mu_);
    if (!EraseLocked(key)) return Status::NotFound("pool: no entry to delete");
    return Status::Ok();
  }

  Result<std::vector<PoolEntryInfo>> Lookup(std::string_view model_id,
                                            uint64_t prefix_hash) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<PoolEntryInfo> out;
    auto it = index_.find({std::string(model_id), prefix_hash});
    if (it == index_.end()) return out;
    for (const auto& [profile, bytes] : it->second) out.push_back({profile, bytes});
    return out;  // std::map: sorted by profile
  }

  Result<PoolStats> Stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  struct Entry {
    std::shared_ptr<const std::vector<uint8_t>> value;
    std::list<PoolKey>::iterator lru;
  };

  bool EraseLocked(const PoolKey& key_ref) {
    auto it = map_.find(key_ref);
    if (it == map_.end()) return false;
    const PoolKey key = it->first;  // key_ref may alias the LRU node erased below
    stats_.bytes -= it->second.value->size();
    lru_.erase(it->second.lru);
    map_.erase(it);
    auto idx = index_.find({key.model_id, key.prefix_hash});
    if (idx != index_.end()) {
      idx->second.erase(key.profile);
      if (idx->second.empty()) index_.erase(idx);
    }
    stats_.entries = map_.size();
    return true;
  }

  const MemoryPoolOptions options_;
  std::mutex mu_;
  std::unordered_map<PoolKey, Entry, KeyHash> map_;
  std::list<PoolKey> lru_;  // front = most recently used
  std::map<std::pair<std::string, uint64_t>, std::map<std::string, uint64_t>> index_;
  PoolStats stats_;
};

}  // namespace

std::unique_ptr<KvPool> NewMemoryPool(MemoryPoolOptions options) {
  return std::make_unique<MemoryPool>(options);
}

}  // namespace kvserve
