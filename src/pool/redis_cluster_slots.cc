// Copyright kvserve authors. Redis Cluster slots.
#include "pool/redis_cluster_slots.h"

#include <hiredis/hiredis.h>

#include <set>

namespace kvserve::pool {

uint16_t Crc16Xmodem(std::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char c : bytes) {
    crc ^= static_cast<uint16_t>(c) << 8;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
  }
  return crc;
}

int KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return Crc16Xmodem(key) & (kRedisClusterSlots - 1);
}

bool SlotMap::Parse(const redisReply* reply, const std::string& queried) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) return false;
  const std::string queried_host = queried.substr(0, queried.rfind(':'));
  std::array<std::string, kRedisClusterSlots> next;
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply* range = reply->element[i];
    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) return false;
    const redisReply* start = range->element[0];
    const redisReply* end = range->element[1];
    const redisReply* node = range->element[2];
    if (start->type != REDIS_REPLY_INTEGER || end->type != REDIS_REPLY_INTEGER ||
        node->type != REDIS_REPLY_ARRAY || node->elements < 2 ||
        node->element[0]->type != REDIS_REPLY_STRING ||
        node->element[1]->type != REDIS_REPLY_INTEGER)
      return false;
    if (start->integer < 0 || end->integer >= kRedisClusterSlots || start->integer > end->integer)
      return false;
    std::string host(node->element[0]->str, node->element[0]->len);
    if (host.empty() || host == "?") host = queried_host;
    const std::string address = host + ":" + std::to_string(node->element[1]->integer);
    for (long long s = start->integer; s <= end->integer; ++s) next[s] = address;
  }
  master = std::move(next);
  return true;
}

int SlotMap::masters() const {
  std::set<std::string> distinct;
  for (const auto& m : master)
    if (!m.empty()) distinct.insert(m);
  return static_cast<int>(distinct.size());
}

}  // namespace kvserve::pool
