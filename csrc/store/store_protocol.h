// Wire protocol of the TCP store: one FrameHeader (common/frame.h) per request and response;
// header.type is the op (requests) or the status (responses), header.seq pairs them up.
// Payload fields are little-endian integers and length-prefixed byte strings (u32 + bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/frame.h"

namespace pscore::store_wire {

// Largest payload the store accepts (a value plus its key); bigger frames drop the connection.
constexpr uint64_t kMaxPayloadBytes = 256ull << 20;

enum class Op : uint8_t {
  kSet = 1,         // key, value
  kGet = 2,         // key, i64 timeout_ms          -> value
  kAdd = 3,         // key, i64 amount              -> i64
  kCompareSet = 4,  // key, expected, desired       -> value
  kWait = 5,        // i64 timeout_ms, u32 n, keys  -> (nothing)
  kCheck = 6,       // u32 n, keys                  -> u8
  kDelete = 7,      // key                          -> u8
  kNumKeys = 8,     //                              -> i64
  // The handshake (store_handshake.h): the first frame of every connection our clients open.
  kHello = 9,  // u32 version, u8 flags, bytes client nonce, bytes job id -> challenge
  kAuth = 10,  // bytes client proof                                     -> (nothing)
};
constexpr uint8_t kMaxOp = 8;  // the last data op; the handshake ops follow it

enum class Status : uint8_t {
  kOk = 0,          // op-specific payload above
  kTimeout = 1,     // u32 n, keys still missing
  kInvalid = 2,     // message (a bad argument, e.g. add on a non-integer value)
  kError = 3,       // message
  kAuthFailed = 4,  // message; the server closes the connection after it
};

const char* op_name(Op op);

// Appends fields to a payload.
class PayloadWriter {
 public:
  PayloadWriter& i64(int64_t v);
  PayloadWriter& u32(uint32_t v);
  PayloadWriter& u8(uint8_t v);
  PayloadWriter& bytes(const std::string& s);
  PayloadWriter& keys(const std::vector<std::string>& ks);
  const std::string& data() const { return data_; }
  std::string take() { return std::move(data_); }

 private:
  std::string data_;
};

// Reads fields from a received payload; throws NetworkError naming `peer` when a field runs
// past the end (nothing is allocated before its length is checked against what is left).
class PayloadReader {
 public:
  PayloadReader(const char* data, size_t size, std::string peer)
      : p_(data), end_(data + size), peer_(std::move(peer)) {}
  int64_t i64();
  uint32_t u32();
  uint8_t u8();
  std::string bytes();
  std::vector<std::string> keys();
  // Throws unless every byte was consumed.
  void finish() const;

 private:
  void need(size_t n, const char* what) const;

  const char* p_;
  const char* end_;
  std::string peer_;
};

// A whole frame (header + payload) ready to send.
std::string encode_frame(uint8_t type, uint64_t seq, const std::string& payload);

}  // namespace pscore::store_wire
