// Copyright kvserve authors. Cryptographic primitives of the handshake
// (docs/transport.md §Authentication): HMAC-SHA256, nonces, constant-time
// comparison, all from OpenSSL. Internal to src/transport.
#ifndef KVSERVE_TRANSPORT_AUTH_H_
#define KVSERVE_TRANSPORT_AUTH_H_

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "kvserve/status.h"

namespace kvserve::transport {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// Fills a nonce from OpenSSL's CSPRNG. Internal when RAND_bytes fails.
Status RandomNonce(Nonce* nonce);
// HMAC-SHA256 keyed by `secret` over label || transcript. The label
// separates the two directions so one side's proof is never valid for the
// other.
Mac ComputeMac(std::string_view secret, std::string_view label,
               std::span<const uint8_t> transcript);
// Constant-time equality (CRYPTO_memcmp) of a received MAC and the expected
// one; false when the sizes differ.
bool MacEquals(std::span<const uint8_t> received, const Mac& expected);

}  // namespace kvserve::transport

#endif  // KVSERVE_TRANSPORT_AUTH_H_
