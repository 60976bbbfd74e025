// Copyright kvserve authors. Redis Cluster key slots and the slot map
// (https://redis.io/docs/reference/cluster-spec/): CRC16-XMODEM of the key,
// or of its hash tag, modulo 16384. Internal to src/pool.
#ifndef KVSERVE_POOL_REDIS_CLUSTER_SLOTS_H_
#define KVSERVE_POOL_REDIS_CLUSTER_SLOTS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

struct redisReply;

namespace kvserve::pool {

inline constexpr int kRedisClusterSlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0, no reflection), the
// checksum Redis Cluster maps keys with. CRC16("123456789") = 0x31C3.
uint16_t Crc16Xmodem(std::string_view bytes);

// The slot of `key`: when the key holds a '{' followed later by a '}' with
// at least one byte between them, only the bytes between the first '{' and
// the first '}' after it count (the hash tag), so keys sharing a tag share a
// slot; otherwise the whole key.
int KeySlot(std::string_view key);

// Which master ("host:port") serves each slot; "" for an unassigned slot.
struct SlotMap {
  std::array<std::string, kRedisClusterSlots> master;
  // Replaces the map from a CLUSTER SLOTS reply; `queried` ("host:port") is
  // the node that answered, used where a node reports an empty host.
  // False (map unchanged) when the reply is malformed.
  bool Parse(const redisReply* reply, const std::string& queried);
  // Distinct masters in the map.
  int masters() const;
};

}  // namespace kvserve::pool

#endif  // KVSERVE_POOL_REDIS_CLUSTER_SLOTS_H_
