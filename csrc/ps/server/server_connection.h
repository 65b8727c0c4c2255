// One client connection on the server: frames are parsed on the event-loop thread into a bounded
// request queue (reading pauses while it is full), handled in order by one pool thread at a time,
// and replies from any thread go to an outbox that is written without blocking.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/event_loop.h"
#include "common/frame.h"
#include "common/handshake.h"
#include "common/socket.h"
#include "ps/server/server_stats.h"
#include "ps/wire/byte_buffer.h"
#include "ps/wire/ps_handshake.h"

namespace pscore::ps {

struct InFrame {
  FrameHeader header;
  ByteBuffer body;
  int64_t received_us = 0;
};

class ServerConnection {
 public:
  enum class Stage { kAwaitHello, kAwaitAuth, kReady };
  enum class FrameAction { kContinue, kPause, kClose };
  enum class ReadResult { kOpen, kPaused, kClosed };

  ServerConnection(Socket sock, uint64_t id, EventLoop* events, ServerStats* stats);

  uint64_t id() const { return id_; }
  int fd() const { return sock_.fd(); }
  const std::string& peer() const { return peer_; }

  // --- event-loop thread only ---
  // Reads what the socket has, calling on_frame per complete frame, whose payload cap is
  // cap_for(stage). Throws NetworkError for a malformed frame. *why explains kClosed.
  ReadResult read_available(const std::function<FrameAction(InFrame&&)>& on_frame,
                            uint64_t max_frame_bytes, std::string* why);
  Stage stage = Stage::kAwaitHello;
  Hello hello;
  std::optional<auth::ServerHandshake> auth;  // made by the hello
  int64_t opened_us = 0;
  std::string close_reason;  // set by whoever answers kClose

  // --- any thread ---
  // Queues a reply frame and writes as much as the socket takes now.
  void send(const FrameHeader& h, ByteBuffer&& body);
  // Loop thread on EPOLLOUT: writes more; true when the outbox fell low enough that a paused
  // request queue should be scheduled again.
  bool on_writable(uint64_t resume_below_bytes);
  void set_reading(bool on);
  void set_reading_locked(bool on);  // caller holds mu
  // Marks the connection closed (sends stop, queued requests are discarded) and shuts the socket.
  void close();
  bool closed();

  // Request queue (see ps_server.cc for the scheduling protocol).
  std::mutex mu;
  std::deque<InFrame> queue;
  uint64_t queued_bytes = 0;
  bool scheduled = false;
  bool output_blocked = false;
  bool resume_requested = false;
  bool reading = true;
  size_t outbox_bytes();
  size_t outbox_bytes_unlocked() const { return outbox_bytes_; }  // caller holds mu

 private:
  bool flush_locked();
  void update_events_locked();
  FrameAction consume(const uint8_t* p, size_t n, size_t* used,
                      const std::function<FrameAction(InFrame&&)>& on_frame, uint64_t cap);

  struct OutFrame {
    FrameHeader header;
    ByteBuffer body;
    size_t sent = 0;
  };

  Socket sock_;
  uint64_t id_;
  EventLoop* events_;
  ServerStats* stats_;
  std::string peer_;
  // read state (loop thread)
  FrameHeader hdr_;
  size_t hdr_got_ = 0;
  bool in_body_ = false;
  ByteBuffer body_;
  size_t body_got_ = 0;
  std::unique_ptr<uint8_t[]> stage_buf_;
  size_t stage_pos_ = 0, stage_len_ = 0;
  // write state (mu)
  std::deque<OutFrame> outbox_;
  size_t outbox_bytes_ = 0;
  bool want_write_ = false;
  bool closed_ = false;
};

}  // namespace pscore::ps
