// The one payload codec of every pscore protocol (store, transport handshake, parameter server)
// and of the parameter server's write-ahead log: little-endian fixed-width fields, u32
// length-prefixed strings and raw spans. WireWriter appends them to a buffer; WireReader reads
// them back, checking every field against what is left and naming the field and the numbers
// when a payload is short or malformed (NetworkError). Fields are copied with memcpy, so
// payloads need no alignment; the hot paths are inline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire is little-endian and fields are copied as the host stores them");

namespace pscore {

namespace wire_sink {
// How a writer appends to the buffers payloads are built in; any other buffer type needs a
// member append(const void*, size_t).
inline void append(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}
inline void append(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
template <typename Buffer>
void append(Buffer& out, const void* p, size_t n) {
  out.append(p, n);
}
}  // namespace wire_sink

// Throws std::invalid_argument "`field` of N bytes exceeds the cap of M".
[[noreturn]] void wire_string_too_long(const char* field, size_t n, uint64_t max_len);

// Appends fields to `Sink`: a buffer type (WireWriter<> owns a std::string, for a payload
// built in one expression) or a reference to one (WireWriter w(body) appends to body).
template <typename Sink = std::string>
class WireWriter {
 public:
  WireWriter() = default;
  explicit WireWriter(Sink out) : out_(out) {}

  WireWriter& u8(uint8_t v) { return put(v); }
  WireWriter& u16(uint16_t v) { return put(v); }
  WireWriter& u32(uint32_t v) { return put(v); }
  WireWriter& u64(uint64_t v) { return put(v); }
  WireWriter& i32(int32_t v) { return put(v); }
  WireWriter& i64(int64_t v) { return put(v); }
  WireWriter& f32(float v) { return put(v); }
  WireWriter& f64(double v) { return put(v); }
  // A fixed-layout record (a packed header struct), its bytes as the host lays them out.
  template <typename T>
  WireWriter& record(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    return bytes(&v, sizeof(T));
  }
  // n raw bytes, no length prefix.
  WireWriter& bytes(const void* p, size_t n) {
    if (n) wire_sink::append(out_, p, n);
    return *this;
  }
  // A u32 length and the bytes of s; throws std::invalid_argument "`field` of N bytes exceeds
  // the cap of M" when s is longer than max_len (or than a u32 can count).
  WireWriter& string(std::string_view s, const char* field = "a string",
                     uint64_t max_len = std::numeric_limits<uint32_t>::max()) {
    if (s.size() > max_len || s.size() > std::numeric_limits<uint32_t>::max())
      wire_string_too_long(field, s.size(), max_len);
    u32(static_cast<uint32_t>(s.size()));
    return bytes(s.data(), s.size());
  }

  std::remove_reference_t<Sink>& out() { return out_; }
  std::remove_reference_t<Sink> take() { return std::move(out_); }

 private:
  template <typename T>
  WireWriter& put(T v) {
    return bytes(&v, sizeof(T));
  }
  Sink out_{};
};
// WireWriter w(buffer) appends to buffer rather than to a copy of it.
template <typename Buffer>
WireWriter(Buffer&) -> WireWriter<Buffer&>;

// Reads fields from a received payload. `context` (who sent it and what it is, "store reply
// from 10.0.0.1:29500") starts every error; it and the payload must outlive the reader.
class WireReader {
 public:
  WireReader(const void* data, size_t size, const char* context)
      : p_(static_cast<const uint8_t*>(data)), size_(size), context_(context) {}
  WireReader(const void* data, size_t size, const std::string& context)
      : p_(static_cast<const uint8_t*>(data)), size_(size), context_(context) {}
  // A temporary context would dangle: keep it in a variable that outlives the reader.
  WireReader(const void* data, size_t size, std::string&& context) = delete;

  uint8_t u8(const char* field) { return get<uint8_t>(field); }
  uint16_t u16(const char* field) { return get<uint16_t>(field); }
  uint32_t u32(const char* field) { return get<uint32_t>(field); }
  uint64_t u64(const char* field) { return get<uint64_t>(field); }
  int32_t i32(const char* field) { return get<int32_t>(field); }
  int64_t i64(const char* field) { return get<int64_t>(field); }
  float f32(const char* field) { return get<float>(field); }
  double f64(const char* field) { return get<double>(field); }
  template <typename T>
  T record(const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    return get<T>(field);
  }
  // A u32 length and that many bytes; a length above max_len is an error before anything is
  // allocated.
  std::string string(const char* field, uint64_t max_len = std::numeric_limits<uint32_t>::max()) {
    const uint32_t n = u32(field);
    if (n > max_len) too_long(field, n, max_len);
    const uint8_t* at = take(n, field);
    return std::string(reinterpret_cast<const char*>(at), n);
  }
  // The next n bytes, in place.
  const uint8_t* raw(size_t n, const char* field) { return take(n, field); }
  // Copies the next n bytes to dst.
  void copy_to(void* dst, size_t n, const char* field) {
    const uint8_t* at = take(n, field);
    if (n) std::memcpy(dst, at, n);
  }
  // The next count elements of T, in place: the count is checked against what is left before
  // it is multiplied, and an address not aligned for T is an error, never an unaligned access.
  template <typename T>
  const T* array(uint64_t count, const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (count > remaining() / sizeof(T)) short_array(field, count, sizeof(T));
    if (count && reinterpret_cast<uintptr_t>(p_ + pos_) % alignof(T)) misaligned(field, alignof(T));
    return reinterpret_cast<const T*>(take(count * sizeof(T), field));
  }
  // The next count elements of T, copied out (at any alignment); the count is checked against
  // what is left before anything is allocated.
  template <typename T>
  std::vector<T> vector(uint64_t count, const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (count > remaining() / sizeof(T)) short_array(field, count, sizeof(T));
    std::vector<T> v(count);
    copy_to(v.data(), count * sizeof(T), field);
    return v;
  }
  // The rest of the payload, in place.
  std::string_view rest() {
    auto* at = reinterpret_cast<const char*>(p_ + pos_);
    const size_t n = remaining();
    pos_ = size_;
    return {at, n};
  }

  size_t remaining() const { return size_ - pos_; }
  size_t position() const { return pos_; }
  size_t size() const { return size_; }
  // Throws unless every byte was read.
  void finish() const {
    if (pos_ != size_) trailing();
  }
  // Throws NetworkError "`context`: malformed payload: why".
  [[noreturn]] void fail(const std::string& why) const;

 private:
  template <typename T>
  T get(const char* field) {
    T v;
    std::memcpy(&v, take(sizeof(T), field), sizeof(T));
    return v;
  }
  const uint8_t* take(size_t n, const char* field) {
    if (n > size_ - pos_) truncated(field, n);
    const uint8_t* at = p_ + pos_;
    pos_ += n;
    return at;
  }
  [[noreturn]] void truncated(const char* field, uint64_t n) const;
  [[noreturn]] void short_array(const char* field, uint64_t count, size_t elem_bytes) const;
  [[noreturn]] void misaligned(const char* field, size_t alignment) const;
  [[noreturn]] void too_long(const char* field, uint64_t n, uint64_t max_len) const;
  [[noreturn]] void trailing() const;

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  std::string_view context_;
};

}  // namespace pscore
