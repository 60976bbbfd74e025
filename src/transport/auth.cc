// Copyright kvserve authors.
#include "transport/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <vector>

namespace kvserve::transport {

Status RandomNonce(Nonce* nonce) {
  if (RAND_bytes(nonce->data(), static_cast<int>(nonce->size())) != 1)
    return Status::Internal("RAND_bytes failed");
  return Status::Ok();
}

Mac ComputeMac(std::string_view secret, std::string_view label,
               std::span<const uint8_t> transcript) {
  std::vector<uint8_t> data(label.begin(), label.end());
  data.insert(data.end(), transcript.begin(), transcript.end());
  static const uint8_t kEmptyKey = 0;
  const void* key = secret.empty() ? static_cast<const void*>(&kEmptyKey) : secret.data();
  Mac mac{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), key, static_cast<int>(secret.size()), data.data(), data.size(), mac.data(),
       &length);
  return mac;
}

bool MacEquals(std::span<const uint8_t> received, const Mac& expected) {
  if (received.size() != expected.size()) return false;
  return CRYPTO_memcmp(received.data(), expected.data(), expected.size()) == 0;
}

}  // namespace kvserve::transport
