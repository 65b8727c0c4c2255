// Little-endian append/read helpers for ps message payloads; the reader bounds-checks every field
// so a malformed payload becomes a NetworkError, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.h"

namespace pscore::ps {

class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    append(s.data(), s.size());
  }
  void append(const void* p, size_t n) {
    if (n == 0) return;
    size_t at = out_->size();
    out_->resize(at + n);
    std::memcpy(out_->data() + at, p, n);
  }

 private:
  std::vector<uint8_t>* out_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* p, size_t n, const char* what) : p_(p), n_(n), what_(what) {}
  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, take(sizeof(T)), sizeof(T));
    return v;
  }
  std::string get_string(size_t max_len = 1 << 16) {
    uint32_t len = get<uint32_t>();
    if (len > max_len)
      throw NetworkError(std::string(what_) + ": string of " + std::to_string(len) +
                         " bytes exceeds " + std::to_string(max_len));
    auto* s = take(len);
    return std::string(reinterpret_cast<const char*>(s), len);
  }
  // Returns a pointer to the next n bytes and advances past them.
  const uint8_t* take(size_t n) {
    if (n > n_ - pos_)
      throw NetworkError(std::string(what_) + ": payload truncated (need " + std::to_string(n) +
                         " more bytes at offset " + std::to_string(pos_) + " of " +
                         std::to_string(n_) + ")");
    const uint8_t* at = p_ + pos_;
    pos_ += n;
    return at;
  }
  size_t remaining() const { return n_ - pos_; }
  size_t position() const { return pos_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  const char* what_;
};

}  // namespace pscore::ps
