// The fixed binary frame header every pscore connection speaks (stores, transport, ps).
#pragma once

#include <cstdint>
#include <string>

namespace pscore {

constexpr uint32_t kFrameMagic = 0x50534352;  // "PSCR"
constexpr uint8_t kFrameVersion = 1;

#pragma pack(push, 1)
struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint8_t version = kFrameVersion;
  uint8_t type = 0;     // protocol-specific message type
  uint16_t flags = 0;   // protocol-specific
  uint32_t tag = 0;     // protocol-specific (e.g. collective tag, table id)
  uint64_t seq = 0;     // request / operation sequence number
  uint64_t length = 0;  // payload bytes that follow
};
#pragma pack(pop)
static_assert(sizeof(FrameHeader) == 28, "frame header is 28 bytes on the wire");

// Throws NetworkError naming `peer` when magic, version or length (against max_payload) are bad.
void validate_frame(const FrameHeader& h, uint64_t max_payload, const std::string& peer);

}  // namespace pscore
