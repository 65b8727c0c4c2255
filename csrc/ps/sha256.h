// SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), written here so the handshake needs no crypto
// library; plus a constant-time comparison for MACs and tokens.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pscore::ps {

using Digest = std::array<uint8_t, 32>;

// Incremental SHA-256: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  Digest finish();

 private:
  void compress(const uint8_t* block);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_bytes_ = 0;
};

Digest sha256(const void* data, size_t n);
Digest hmac_sha256(const std::string& key, const void* msg, size_t n);
// Compares n bytes in time independent of where they differ.
bool constant_time_equal(const void* a, const void* b, size_t n);
std::string to_hex(const uint8_t* data, size_t n);

}  // namespace pscore::ps
