// Copyright kvserve authors. Pieces of the Redis key schemes shared by the
// single-node and the cluster backends (docs/transport.md §KV pool).
// Internal to src/pool.
#ifndef KVSERVE_POOL_REDIS_KEYS_H_
#define KVSERVE_POOL_REDIS_KEYS_H_

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace kvserve::pool {

// Percent-escapes '%', ':' and bytes outside 0x21..0x7e (with `braces`
// also '{' and '}', Redis Cluster's hash-tag delimiters), so that the key
// separator (and the hash tag) are unambiguous.
inline std::string RedisEscape(std::string_view s, bool braces = false) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '%' || c == ':' || (braces && (c == '{' || c == '}')) || c < 0x21 || c > 0x7e) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// 16 lower-case hex digits.
inline std::string RedisHex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

}  // namespace kvserve::pool

#endif  // KVSERVE_POOL_REDIS_KEYS_H_
