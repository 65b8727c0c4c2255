// Blocking, bounded send and receive of one whole frame (common/frame.h) on a socket: what the
// handshakes' blocking sides (the transport's mesh, the parameter-server client) speak.
#pragma once

#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/frame.h"
#include "common/socket.h"

namespace pscore {

struct Frame {
  FrameHeader header;
  std::string payload;
};

// Sends `header` (its length set to the payload's) and `payload` in one write. Throws
// NetworkError / TimeoutError naming `what`.
void send_frame(const Socket& s, FrameHeader header, const std::string& payload,
                const Deadline& deadline, const std::string& what);
// Receives one frame whose payload may not exceed max_payload bytes; the header is checked
// (validate_frame, naming `peer`) before the payload is allocated. Throws NetworkError /
// TimeoutError naming `what`.
Frame recv_frame(const Socket& s, uint64_t max_payload, const Deadline& deadline,
                 const std::string& peer, const std::string& what);

}  // namespace pscore
