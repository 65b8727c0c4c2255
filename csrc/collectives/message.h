// The header in front of every collective and point-to-point message, which lets a receiver
// detect ranks that disagree on the operation, its sequence number, dtype or size.
#pragma once

#include <cstdint>
#include <string>

#include "common/dtype.h"

namespace pscore {

enum class OpKind : uint8_t {
  kAllreduce = 1,
  kBroadcast,
  kReduce,
  kAllgather,
  kReduceScatter,
  kGather,
  kScatter,
  kAllToAll,
  kBarrier,
  kSend,
};

const char* op_kind_name(OpKind k);
// Whether receivers in an operation of this kind fold what they receive into their buffers.
bool reduces(OpKind k);

constexpr uint32_t kMessageMagic = 0x4d534350;  // "PCSM"
// The payload stays in the sender's memory: its address (8 bytes) follows the header in place of
// the bytes and padding, and the receiver reads it through Channel::read_peer.
constexpr uint16_t kSingleCopyFlag = 1;

struct MessageHeader {
  uint32_t magic = kMessageMagic;
  uint8_t op = 0;
  uint8_t dtype = 0;
  uint16_t flags = 0;   // kSingleCopyFlag
  uint64_t seq = 0;     // the group's operation counter (p2p: the pair's message counter)
  uint64_t nbytes = 0;  // payload bytes, before padding to 8
  uint32_t tag = 0;
  uint32_t reserved2 = 0;
};
static_assert(sizeof(MessageHeader) == 32, "message header is 32 bytes");

// Why a received header does not belong to the message this rank expects (a stream out of step,
// ranks that disagree on the operation, its sequence number, dtype, size or tag), or "" when it
// does. Reads only the header's fields, so any 32 bytes from the network are safe to judge.
std::string message_header_mismatch(const MessageHeader& received, const MessageHeader& expected);

// Messages are padded so every message starts 8-byte aligned in a byte stream.
inline uint64_t padding_for(uint64_t nbytes) { return (8 - nbytes % 8) % 8; }

}  // namespace pscore
