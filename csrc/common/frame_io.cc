#include "common/frame_io.h"

namespace pscore {

void send_frame(const Socket& s, FrameHeader header, const std::string& payload,
                const Deadline& deadline, const std::string& what) {
  header.length = payload.size();
  std::string buf(reinterpret_cast<const char*>(&header), sizeof(header));
  buf += payload;
  s.send_all(buf.data(), buf.size(), deadline, what);
}

Frame recv_frame(const Socket& s, uint64_t max_payload, const Deadline& deadline,
                 const std::string& peer, const std::string& what) {
  Frame f;
  s.recv_all(&f.header, sizeof(f.header), deadline, what);
  validate_frame(f.header, max_payload, peer);
  f.payload.resize(f.header.length);
  if (!f.payload.empty()) s.recv_all(f.payload.data(), f.payload.size(), deadline, what);
  return f;
}

}  // namespace pscore
