// libFuzzer target for the KV pool's wire protocol (docs/transport.md §7):
// keys, key lists, prefixes, replies and their LOOKUP / STATS bodies, as the pool
// server and its client parse them. A decoded key is also put, got and
// deleted in an embedded pool (with the rest of the input as the value),
// which must treat it exactly as its validation says.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvserve/pool.h"
#include "pool/pool_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  if (size < 1) return 0;
  const std::span<const uint8_t> in(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      PoolKey key;
      auto used = pool::DecodeKey(in, &key);
      if (!used.ok()) break;
      if (*used > in.size()) __builtin_trap();
      static std::unique_ptr<KvPool> memory = NewMemoryPool({.budget_bytes = 1 << 20});
      const bool valid = ValidatePoolKey(key).ok();
      Status put = memory->Put(key, in.subspan(*used));
      if (valid != (put.ok() || put.code() == StatusCode::kResourceExhausted)) __builtin_trap();
      std::vector<uint8_t> got;
      if (put.ok() && (!memory->Get(key, &got).ok() || !memory->Delete(key).ok())) __builtin_trap();
      break;
    }
    case 1: {
      std::string model;
      uint64_t hash = 0;
      (void)pool::DecodePrefix(in, &model, &hash);
      break;
    }
    default: {
      std::span<const uint8_t> body;
      (void)pool::DecodeReply(in, &body);
      (void)pool::DecodeLookup(in);
      (void)pool::DecodeStats(in);
      // A key list that decodes re-encodes to the same bytes.
      if (auto keys = pool::DecodeKeys(in); keys.ok()) {
        std::vector<uint8_t> again;
        pool::EncodeKeys(*keys, &again);
        if (!std::equal(again.begin(), again.end(), in.begin(), in.end())) __builtin_trap();
      }
    }
  }
  return 0;
}
