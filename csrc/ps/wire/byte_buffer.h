// A growable byte buffer that does not zero what it allocates (a 32 MB frame body is written by
// recv or memcpy anyway), for frame payloads on both ends of a connection. Large allocations are
// recycled through a process-wide pool: a fresh 32 MB block costs thousands of page faults and
// the kernel's zeroing on every request, a recycled one nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

namespace pscore::ps {

// Blocks of at least kMinBytes are kept (up to kMaxBytes in all) for reuse.
class BufferPool {
 public:
  static constexpr size_t kMinBytes = size_t(256) << 10;
  static constexpr size_t kMaxBytes = size_t(1) << 30;
  static BufferPool& instance();
  // A block of at least n bytes (its capacity in *capacity), recycled when one fits.
  std::unique_ptr<uint8_t[]> take(size_t n, size_t* capacity);
  void give(std::unique_ptr<uint8_t[]> block, size_t capacity);
};

class ByteBuffer {
 public:
  ByteBuffer() = default;
  explicit ByteBuffer(size_t n) { resize(n); }
  ~ByteBuffer() { release(); }
  ByteBuffer(ByteBuffer&& o) noexcept
      : data_(std::move(o.data_)), size_(o.size_), capacity_(o.capacity_) {
    o.size_ = o.capacity_ = 0;
  }
  ByteBuffer& operator=(ByteBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::move(o.data_);
      size_ = o.size_;
      capacity_ = o.capacity_;
      o.size_ = o.capacity_ = 0;
    }
    return *this;
  }
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  // Sets the size, keeping the first min(old, n) bytes; new bytes are uninitialised.
  void resize(size_t n) {
    if (n > capacity_) grow(n, n);
    size_ = n;
  }
  void append(const void* p, size_t n) {
    size_t at = size_;
    if (at + n > capacity_) grow(at + n, std::max<size_t>(64, 2 * capacity_));
    size_ = at + n;
    if (n) std::memcpy(data_.get() + at, p, n);
  }

 private:
  void grow(size_t need, size_t want);
  void release();
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace pscore::ps
