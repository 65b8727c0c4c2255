// Wire protocol of the TCP store: one FrameHeader (common/frame.h) per request and response;
// header.type is the op (requests) or the status (responses), header.seq pairs them up.
// Payload fields are little-endian integers and length-prefixed byte strings (u32 + bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/frame.h"
#include "common/wire_codec.h"

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

// A key list: u32 n, then n strings (common/wire_codec.h).
void write_keys(WireWriter<>& w, const std::vector<std::string>& keys);
// Reads a key list; n is checked against what is left before anything is reserved.
std::vector<std::string> read_keys(WireReader& r, const char* field);

// A whole frame (header + payload) ready to send.
std::string encode_frame(uint8_t type, uint64_t seq, const std::string& payload);

}  // namespace pscore::store_wire
