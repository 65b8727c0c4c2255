#include "store/store_protocol.h"

#include <cstring>

#include "common/error.h"

namespace pscore::store_wire {

const char* op_name(Op op) {
  switch (op) {
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kAdd:
      return "add";
    case Op::kCompareSet:
      return "compare_set";
    case Op::kWait:
      return "wait";
    case Op::kCheck:
      return "check";
    case Op::kDelete:
      return "delete_key";
    case Op::kNumKeys:
      return "num_keys";
    case Op::kHello:
      return "hello";
    case Op::kAuth:
      return "auth";
  }
  return "unknown op";
}

namespace {
template <typename T>
void append_raw(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}
}  // namespace

PayloadWriter& PayloadWriter::i64(int64_t v) {
  append_raw(data_, v);
  return *this;
}

PayloadWriter& PayloadWriter::u32(uint32_t v) {
  append_raw(data_, v);
  return *this;
}

PayloadWriter& PayloadWriter::u8(uint8_t v) {
  append_raw(data_, v);
  return *this;
}

PayloadWriter& PayloadWriter::bytes(const std::string& s) {
  if (s.size() > kMaxPayloadBytes)
    throw std::invalid_argument("store: a key or value of " + std::to_string(s.size()) +
                                " bytes exceeds the cap of " + std::to_string(kMaxPayloadBytes));
  u32(static_cast<uint32_t>(s.size()));
  data_ += s;
  return *this;
}

PayloadWriter& PayloadWriter::keys(const std::vector<std::string>& ks) {
  u32(static_cast<uint32_t>(ks.size()));
  for (const auto& k : ks) bytes(k);
  return *this;
}

void PayloadReader::need(size_t n, const char* what) const {
  if (static_cast<size_t>(end_ - p_) < n)
    throw NetworkError(peer_ + ": malformed store payload (" + what + " needs " +
                       std::to_string(n) + " bytes, " + std::to_string(end_ - p_) + " left)");
}

int64_t PayloadReader::i64() {
  need(8, "i64");
  int64_t v;
  std::memcpy(&v, p_, 8);
  p_ += 8;
  return v;
}

uint32_t PayloadReader::u32() {
  need(4, "u32");
  uint32_t v;
  std::memcpy(&v, p_, 4);
  p_ += 4;
  return v;
}

uint8_t PayloadReader::u8() {
  need(1, "u8");
  return static_cast<uint8_t>(*p_++);
}

std::string PayloadReader::bytes() {
  uint32_t n = u32();
  need(n, "byte string");
  std::string s(p_, n);
  p_ += n;
  return s;
}

std::vector<std::string> PayloadReader::keys() {
  uint32_t n = u32();
  // Each key takes at least its 4-byte length, which bounds n before reserving.
  need(static_cast<size_t>(n) * 4, "key list");
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(bytes());
  return out;
}

void PayloadReader::finish() const {
  if (p_ != end_)
    throw NetworkError(peer_ + ": malformed store payload (" + std::to_string(end_ - p_) +
                       " trailing bytes)");
}

std::string encode_frame(uint8_t type, uint64_t seq, const std::string& payload) {
  FrameHeader h;
  h.type = type;
  h.seq = seq;
  h.length = payload.size();
  std::string out(sizeof(h), '\0');
  std::memcpy(out.data(), &h, sizeof(h));
  out += payload;
  return out;
}

}  // namespace pscore::store_wire
