#include "common/frame.h"

#include "common/error.h"

namespace pscore {

void validate_frame(const FrameHeader& h, uint64_t max_payload, const std::string& peer) {
  if (h.magic != kFrameMagic)
    throw NetworkError(peer + ": bad frame magic (not a pscore peer, or garbage on the port)");
  if (h.version != kFrameVersion)
    throw NetworkError(peer + ": frame version " + std::to_string(h.version) + ", expected " +
                       std::to_string(kFrameVersion));
  if (h.length > max_payload)
    throw NetworkError(peer + ": frame length " + std::to_string(h.length) +
                       " exceeds the cap of " + std::to_string(max_payload) + " bytes");
}

}  // namespace pscore
