// Copyright kvserve authors.
#include "transport/wire.h"

#include <algorithm>
#include <string>

#include "core/checksum.h"

namespace kvserve::transport {

void EncodeMessageHeader(const MessageHeader& header, uint8_t out[kMessageHeaderBytes]) {
  out[0] = kMessageMagic0;
  out[1] = kMessageMagic1;
  out[2] = header.type;
  out[3] = header.flags;
  PutU64(out + 4, header.length);
  PutU32(out + 12, header.payload_checksum);
  PutU32(out + 16, Checksum32(out, 16));
}

Status DecodeMessageHeader(std::span<const uint8_t> bytes, uint64_t max_length,
                           MessageHeader* header) {
  if (bytes.size() < kMessageHeaderBytes) return Status::Corruption("truncated message header");
  const uint8_t* p = bytes.data();
  if (GetU32(p + 16) != Checksum32(p, 16))
    return Status::Corruption("message header checksum mismatch");
  if (p[0] != kMessageMagic0 || p[1] != kMessageMagic1)
    return Status::Corruption("bad message magic");
  header->type = p[2];
  header->flags = p[3];
  header->length = GetU64(p + 4);
  header->payload_checksum = GetU32(p + 12);
  if (header->length > max_length)
    return Status::ResourceExhausted("message length " + std::to_string(header->length) +
                                     " exceeds the limit of " + std::to_string(max_length) +
                                     " bytes");
  return Status::Ok();
}

void EncodeStatus(const Status& status, std::vector<uint8_t>* out) {
  out->clear();
  out->push_back(static_cast<uint8_t>(status.code()));
  const std::string& m = status.message();
  out->insert(out->end(), m.begin(), m.begin() + std::min<size_t>(m.size(), 512));
}

Status DecodeStatus(std::span<const uint8_t> payload) {
  if (payload.empty()) return Status::Corruption("empty status payload");
  uint8_t code = payload[0];
  if (code > static_cast<uint8_t>(StatusCode::kInternal))
    return Status::Corruption("unknown status code " + std::to_string(code));
  std::string message(payload.begin() + 1, payload.end());
  for (char& c : message)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  if (code == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(code), std::move(message));
}

}  // namespace kvserve::transport
