#include "ps/durability/checkpoint_legacy_v1.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace pscore::ps::legacy_v1 {
namespace {

[[noreturn]] void not_a_layout(const std::string& where, const std::string& why) {
  throw std::invalid_argument(where + ": not a format-1 table layout (" + why + ")");
}

// Little-endian fields of the format-1 layout encoding, bounds-checked.
class Fields {
 public:
  Fields(const uint8_t* bytes, size_t n, const std::string& where)
      : bytes_(bytes), n_(n), where_(where) {}

  // A little-endian integer or IEEE double of sizeof(T) bytes.
  template <typename T>
  T get() {
    static_assert(sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8);
    using Bits = std::conditional_t<sizeof(T) == 8, uint64_t,
                                    std::conditional_t<sizeof(T) == 4, uint32_t, uint8_t>>;
    const uint8_t* p = take(sizeof(T));
    Bits bits = 0;
    for (size_t i = 0; i < sizeof(T); ++i) bits |= static_cast<Bits>(Bits{p[i]} << (8 * i));
    T v;
    std::memcpy(&v, &bits, sizeof(T));
    return v;
  }
  std::string get_string(uint32_t max_len) {
    const uint32_t len = get<uint32_t>();
    if (len > max_len) fail("a string of " + std::to_string(len) + " bytes");
    const uint8_t* p = take(len);
    return std::string(reinterpret_cast<const char*>(p), len);
  }
  // An enum stored as one byte, checked against its last value.
  template <typename E>
  E get_enum(E last, const char* what) {
    const uint8_t v = get<uint8_t>();
    if (v > static_cast<uint8_t>(last))
      fail(std::string("unknown ") + what + " " + std::to_string(v));
    return static_cast<E>(v);
  }
  void expect_end() {
    if (pos_ != n_) fail(std::to_string(n_ - pos_) + " bytes after the layout");
  }
  size_t position() const { return pos_; }
  [[noreturn]] void fail(const std::string& why) const { not_a_layout(where_, why); }

 private:
  const uint8_t* take(size_t n) {
    if (n > n_ - pos_)
      fail("truncated: " + std::to_string(n) + " more bytes needed at byte " +
           std::to_string(pos_) + " of " + std::to_string(n_));
    const uint8_t* p = bytes_ + pos_;
    pos_ += n;
    return p;
  }

  const uint8_t* bytes_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& where_;
};

std::vector<uint8_t> from_hex(const std::string& hex, const std::string& where) {
  if (hex.size() % 2) not_a_layout(where, "odd-length hex");
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    not_a_layout(where, std::string("bad hex digit '") + c + "'");
  };
  std::vector<uint8_t> bytes(hex.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<uint8_t>(nibble(hex[2 * i]) * 16 + nibble(hex[2 * i + 1]));
  return bytes;
}

// Field order of format 1: name, kind, shape, initializer, optimizer (kind, flags, twelve
// doubles), consistency, capacity, max_rows_per_shard.
TableSpec read_spec(Fields& f) {
  TableSpec s;
  s.name = f.get_string(256);
  s.kind = f.get_enum(TableKind::kSparse, "table kind");
  const uint32_t ndim = f.get<uint32_t>();
  if (ndim > 16) f.fail(std::to_string(ndim) + " dimensions");
  for (uint32_t i = 0; i < ndim; ++i) s.shape.push_back(f.get<int64_t>());
  s.init.kind = f.get_enum(InitKind::kConstant, "initializer");
  s.init.a = f.get<double>();
  s.init.b = f.get<double>();
  s.init.seed = f.get<uint64_t>();
  OptimizerSpec& o = s.optimizer;
  o.kind = f.get_enum(OptimizerKind::kRmsprop, "optimizer");
  const uint8_t flags = f.get<uint8_t>();
  o.nesterov = flags & 1;
  o.amsgrad = flags & 2;
  o.centered = flags & 4;
  for (double* v :
       {&o.lr, &o.momentum, &o.dampening, &o.weight_decay, &o.beta1, &o.beta2, &o.eps, &o.lr_decay,
        &o.initial_accumulator_value, &o.alpha, &o.clip_norm, &o.clip_value})
    *v = f.get<double>();
  s.consistency.mode = f.get_enum(Consistency::kSsp, "consistency mode");
  s.consistency.staleness = f.get<int32_t>();
  s.consistency.backup_workers = f.get<int32_t>();
  s.capacity = f.get<int64_t>();
  s.max_rows_per_shard = f.get<int64_t>();
  return s;
}

// Field order: id, spec, part count, parts (shard, offset, numel).
TableLayout read_layout(Fields& f) {
  TableLayout l;
  l.id = f.get<uint32_t>();
  l.spec = read_spec(f);
  const uint32_t n = f.get<uint32_t>();
  if (n > (1u << 16)) f.fail(std::to_string(n) + " parts");
  for (uint32_t i = 0; i < n; ++i) {
    DensePart p;
    p.shard = f.get<int32_t>();
    p.offset = f.get<int64_t>();
    p.numel = f.get<int64_t>();
    l.parts.push_back(p);
  }
  return l;
}

}  // namespace

TableLayout decode_layout_hex(const std::string& hex, const std::string& where) {
  const std::vector<uint8_t> bytes = from_hex(hex, where);
  Fields f(bytes.data(), bytes.size(), where);
  TableLayout l = read_layout(f);
  f.expect_end();
  return l;
}

TableLayout decode_layout_prefix(const uint8_t* bytes, size_t n, size_t* used,
                                 const std::string& where) {
  Fields f(bytes, n, where);
  TableLayout l = read_layout(f);
  *used = f.position();
  return l;
}

}  // namespace pscore::ps::legacy_v1
