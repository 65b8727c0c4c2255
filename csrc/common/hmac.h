// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) for the connection handshakes, so pscore needs
// no crypto library; plus a comparison whose time does not depend on where two MACs differ.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pscore::crypto {

constexpr size_t kDigestBytes = 32;
using Digest = std::array<uint8_t, kDigestBytes>;

// Incremental SHA-256: update() any number of times, then digest() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t nbytes);
  void update(const std::string& s) { update(s.data(), s.size()); }
  Digest digest();

 private:
  void compress(const uint8_t* block);

  uint32_t state_[8];
  uint8_t block_[64];
  size_t block_len_ = 0;
  uint64_t total_bytes_ = 0;
};

Digest sha256(const void* data, size_t nbytes);
Digest sha256(const std::string& s);

// HMAC-SHA256 of a message with a key of any length (keys over 64 bytes are hashed first).
Digest hmac_sha256(const std::string& key, const void* msg, size_t nbytes);
Digest hmac_sha256(const std::string& key, const std::string& msg);

// True when the n bytes at a and b are equal; the time taken does not depend on their contents.
bool constant_time_equal(const void* a, const void* b, size_t nbytes);

// Lower-case hex of bytes (tests and logs).
std::string hex(const void* data, size_t nbytes);

}  // namespace pscore::crypto
