// Copyright kvserve authors. The message header of the wire protocol
// (docs/transport.md §Framing) and the transport's reserved message types.
// Internal to src/transport and its tests.
#ifndef KVSERVE_TRANSPORT_WIRE_H_
#define KVSERVE_TRANSPORT_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/status.h"

namespace kvserve::transport {

inline constexpr size_t kMessageHeaderBytes = 20;
inline constexpr uint8_t kMessageMagic0 = 0x4B;  // 'K'
inline constexpr uint8_t kMessageMagic1 = 0x4D;  // 'M'

// Reserved types (>= 0xE0).
inline constexpr uint8_t kMsgHello = 0xF1;
inline constexpr uint8_t kMsgChallenge = 0xF2;
inline constexpr uint8_t kMsgResponse = 0xF3;
inline constexpr uint8_t kMsgAuthOk = 0xF4;
inline constexpr uint8_t kMsgError = 0xFF;

// Handshake messages are at most this long, whatever max_message_bytes says.
inline constexpr uint64_t kMaxHandshakeMessageBytes = 1024;

struct MessageHeader {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint64_t length = 0;
  uint32_t payload_checksum = 0;
};

// Serialises `header` (computing the header checksum) into `out`.
void EncodeMessageHeader(const MessageHeader& header, uint8_t out[kMessageHeaderBytes]);
// Parses and verifies 20 header bytes: Corruption on a bad checksum, magic or
// reserved byte; ResourceExhausted when length > max_length. Nothing is
// allocated.
Status DecodeMessageHeader(std::span<const uint8_t> bytes, uint64_t max_length,
                           MessageHeader* header);

// Little-endian helpers.
inline void PutU16(uint8_t* p, uint16_t v) { p[0] = v & 0xff; p[1] = v >> 8; }
inline void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t GetU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Status <-> ERROR payload (u8 code, message bytes). Decoding never fails:
// malformed payloads give Corruption.
void EncodeStatus(const Status& status, std::vector<uint8_t>* out);
Status DecodeStatus(std::span<const uint8_t> payload);

}  // namespace kvserve::transport

#endif  // KVSERVE_TRANSPORT_WIRE_H_
