#include "common/hmac.h"

#include <algorithm>
#include <cstring>

namespace pscore::crypto {
namespace {

// FIPS 180-4 section 4.2.2: the first 32 bits of the fractional parts of the cube roots of the
// first 64 primes.
constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// Section 5.3.3: the first 32 bits of the fractional parts of the square roots of the first 8
// primes.
constexpr uint32_t kInitialState[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

constexpr size_t kBlockBytes = 64;

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
inline uint32_t ch(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }
inline uint32_t maj(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (x & z) ^ (y & z); }
inline uint32_t big_sigma0(uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
inline uint32_t big_sigma1(uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
inline uint32_t small_sigma0(uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
inline uint32_t small_sigma1(uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }

inline uint32_t load_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

inline void store_be32(uint32_t v, uint8_t* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

}  // namespace

Sha256::Sha256() { std::memcpy(state_, kInitialState, sizeof(state_)); }

// Section 6.2.2: expand the block into the 64-word message schedule, run 64 rounds over the
// working variables a..h, and add them into the state.
void Sha256::compress(const uint8_t* block) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) w[t] = load_be32(block + 4 * t);
  for (int t = 16; t < 64; ++t)
    w[t] = small_sigma1(w[t - 2]) + w[t - 7] + small_sigma0(w[t - 15]) + w[t - 16];
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t t1 = h + big_sigma1(e) + ch(e, f, g) + kRoundConstants[t] + w[t];
    uint32_t t2 = big_sigma0(a) + maj(a, b, c);
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(const void* data, size_t nbytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_bytes_ += nbytes;
  if (block_len_ > 0) {
    size_t take = std::min(nbytes, kBlockBytes - block_len_);
    std::memcpy(block_ + block_len_, p, take);
    block_len_ += take;
    p += take;
    nbytes -= take;
    if (block_len_ < kBlockBytes) return;
    compress(block_);
    block_len_ = 0;
  }
  for (; nbytes >= kBlockBytes; p += kBlockBytes, nbytes -= kBlockBytes) compress(p);
  std::memcpy(block_, p, nbytes);
  block_len_ = nbytes;
}

// Section 5.1.1 padding: a 1 bit, zeros up to 56 bytes mod 64, then the length in bits as a
// big-endian 64-bit integer.
Digest Sha256::digest() {
  uint64_t total_bits = total_bytes_ * 8;
  uint8_t pad[kBlockBytes * 2] = {0x80};
  size_t pad_len = (block_len_ < 56 ? 56 : 56 + kBlockBytes) - block_len_;
  update(pad, pad_len);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(total_bits >> (56 - 8 * i));
  update(length, sizeof(length));
  Digest out;
  for (int i = 0; i < 8; ++i) store_be32(state_[i], out.data() + 4 * i);
  return out;
}

Digest sha256(const void* data, size_t nbytes) {
  Sha256 h;
  h.update(data, nbytes);
  return h.digest();
}

Digest sha256(const std::string& s) { return sha256(s.data(), s.size()); }

// RFC 2104: H((K' ^ opad) || H((K' ^ ipad) || message)), K' the key zero-padded to the block
// size (hashed first when longer than a block).
Digest hmac_sha256(const std::string& key, const void* msg, size_t nbytes) {
  uint8_t k[kBlockBytes] = {0};
  if (key.size() > kBlockBytes) {
    Digest kd = sha256(key);
    std::memcpy(k, kd.data(), kd.size());
  } else {
    std::memcpy(k, key.data(), key.size());
  }
  uint8_t ipad[kBlockBytes], opad[kBlockBytes];
  for (size_t i = 0; i < kBlockBytes; ++i) {
    ipad[i] = k[i] ^ 0x36;
    opad[i] = k[i] ^ 0x5c;
  }
  Sha256 inner;
  inner.update(ipad, sizeof(ipad));
  inner.update(msg, nbytes);
  Digest inner_digest = inner.digest();
  Sha256 outer;
  outer.update(opad, sizeof(opad));
  outer.update(inner_digest.data(), inner_digest.size());
  return outer.digest();
}

Digest hmac_sha256(const std::string& key, const std::string& msg) {
  return hmac_sha256(key, msg.data(), msg.size());
}

bool constant_time_equal(const void* a, const void* b, size_t nbytes) {
  // volatile keeps the compiler from turning the loop into an early-exit comparison.
  const volatile uint8_t* x = static_cast<const volatile uint8_t*>(a);
  const volatile uint8_t* y = static_cast<const volatile uint8_t*>(b);
  uint8_t diff = 0;
  for (size_t i = 0; i < nbytes; ++i) diff |= x[i] ^ y[i];
  return diff == 0;
}

std::string hex(const void* data, size_t nbytes) {
  static const char kDigits[] = "0123456789abcdef";
  const uint8_t* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve(nbytes * 2);
  for (size_t i = 0; i < nbytes; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

}  // namespace pscore::crypto
