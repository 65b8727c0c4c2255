// One client connection as the TCP store server sees it: non-blocking reads into a buffer,
// frame extraction (validated before anything is allocated), a write queue, and the client's
// parked get/wait if it has one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/event_loop.h"
#include "common/frame.h"
#include "common/socket.h"
#include "store/store_handshake.h"
#include "store/store_protocol.h"

namespace pscore {

// A get or wait parked until its keys exist or its deadline passes.
struct ParkedWait {
  std::optional<EventLoop::TimerId> timer;  // its deadline; none when it waits forever
  store_wire::Op op = store_wire::Op::kWait;
  uint64_t seq = 0;
  std::vector<std::string> keys;
};

class StoreConnection {
 public:
  StoreConnection(Socket socket, uint64_t max_payload_bytes);

  int fd() const { return socket_.fd(); }
  const std::string& peer() const { return peer_; }             // "TCPStore client host:port"
  const std::string& peer_address() const { return address_; }  // "host:port"

  // Reads everything the socket has now. False when the peer closed or the socket failed.
  bool read_available();
  // Extracts the next complete frame. False when none is complete yet; throws NetworkError for
  // a bad magic, version or length (the caller drops the connection).
  bool next_frame(FrameHeader* header, std::string* payload);
  bool has_buffered_input() const { return in_pos_ < in_.size(); }
  // Frames above this are dropped: small until the connection has authenticated.
  void set_max_payload(uint64_t nbytes) { max_payload_ = nbytes; }

  void queue(const std::string& bytes) { out_ += bytes; }
  // Sends what the socket takes now. False when the socket failed.
  bool flush();
  bool wants_write() const { return out_pos_ < out_.size(); }

  std::optional<ParkedWait> parked;
  StoreServerHandshake handshake;
  std::optional<EventLoop::TimerId> handshake_timer;  // closes it unless it authenticates first
  bool closing = false;
  bool polling_out = false;  // EPOLLOUT currently registered

 private:
  Socket socket_;
  std::string peer_;
  std::string address_;
  uint64_t max_payload_;
  std::string in_;
  size_t in_pos_ = 0;
  std::string out_;
  size_t out_pos_ = 0;
};

}  // namespace pscore
