// A growable byte buffer that does not zero what it allocates (a 32 MB frame body is written by
// recv or memcpy anyway), for frame payloads on both ends of a connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

namespace pscore::ps {

class ByteBuffer {
 public:
  ByteBuffer() = default;
  explicit ByteBuffer(size_t n) { resize(n); }
  ByteBuffer(ByteBuffer&&) noexcept = default;
  ByteBuffer& operator=(ByteBuffer&&) noexcept = default;

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  // Sets the size, keeping the first min(old, n) bytes; new bytes are uninitialised.
  void resize(size_t n) {
    if (n > capacity_) {
      std::unique_ptr<uint8_t[]> bigger(new uint8_t[n]);
      if (size_) std::memcpy(bigger.get(), data_.get(), size_);
      data_ = std::move(bigger);
      capacity_ = n;
    }
    size_ = n;
  }
  void append(const void* p, size_t n) {
    size_t at = size_;
    if (at + n > capacity_) reserve_more(at + n);
    size_ = at + n;
    if (n) std::memcpy(data_.get() + at, p, n);
  }
  template <typename T>
  void put(const T& v) {
    append(&v, sizeof(T));
  }

 private:
  void reserve_more(size_t need) {
    size_t cap = capacity_ < 64 ? 64 : capacity_;
    while (cap < need) cap *= 2;
    size_t keep = size_;
    std::unique_ptr<uint8_t[]> bigger(new uint8_t[cap]);
    if (keep) std::memcpy(bigger.get(), data_.get(), keep);
    data_ = std::move(bigger);
    capacity_ = cap;
  }
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace pscore::ps
