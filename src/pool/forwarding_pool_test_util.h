// Copyright kvserve authors. A KvPool that forwards every call to another
// one: the base of tests' pools that change one call (a Get that loses,
// corrupts or holds back frames) and leave the rest as the pool has it.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "kvserve/pool.h"

namespace kvserve::pooltest {

class ForwardingPool : public KvPool {
 public:
  // `base` (not owned) outlives this pool.
  explicit ForwardingPool(KvPool* base) : base_(base) {}
  Status Put(const PoolKey& key, std::span<const uint8_t> frame) override { return base_->Put(key, frame); }
  Status Get(const PoolKey& key, std::vector<uint8_t>* frame) override { return base_->Get(key, frame); }
  Status Delete(const PoolKey& key) override { return base_->Delete(key); }
  Result<std::vector<PoolEntryInfo>> Lookup(std::string_view model_id, uint64_t prefix_hash) override {
    return base_->Lookup(model_id, prefix_hash);
  }
  Result<PoolStats> Stats() override { return base_->Stats(); }

 protected:
  KvPool* base() const { return base_; }

 private:
  KvPool* base_;
};

}  // namespace kvserve::pooltest
