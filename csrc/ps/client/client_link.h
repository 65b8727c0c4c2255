// The client's connection to one shard, driven by the client's I/O thread: sub-requests are
// written from their buffers without copies (header + prefix + caller memory via sendmsg), and
// replies are read straight into their destinations (caller arrays or scratch buffers).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/socket.h"
#include "ps/client/client_work.h"

namespace pscore::ps {

class ClientLink {
 public:
  ClientLink(int shard, std::string address, Socket sock, uint64_t incarnation,
             uint64_t max_reply_bytes);

  int fd() const { return sock_.fd(); }
  int shard() const { return shard_; }
  const std::string& name() const { return name_; }
  uint64_t incarnation() const { return incarnation_; }

  // Gives the sub-request a request id and queues it for sending.
  void enqueue(const std::shared_ptr<SubRequest>& s);
  bool wants_write() const { return !sendq_.empty(); }
  // Writes until the socket is full or the queue empty; false (with *why) on a broken socket.
  bool write_some(std::string* why);
  // Reads available replies; completed sub-requests (successful or failed by an error reply)
  // are appended to `done`. False (with *why) when the connection broke or spoke garbage.
  bool read_some(std::string* why, std::vector<std::shared_ptr<SubRequest>>& done);
  // Every queued or unanswered sub-request (the connection is being abandoned).
  std::vector<std::shared_ptr<SubRequest>> take_all();
  // The earliest deadline among unanswered sub-requests (INT64_MAX when none).
  int64_t earliest_deadline() const;
  void close() { sock_.close(); }

 private:
  bool begin_body(std::string* why);
  void complete_current(std::vector<std::shared_ptr<SubRequest>>& done);
  // Where the current reply's next bytes go: up to max iovecs from the cursor.
  int body_iov(iovec* out, int max) const;
  void body_advance(size_t n);

  int shard_;
  std::string name_;
  Socket sock_;
  uint64_t incarnation_;
  uint64_t max_reply_bytes_;
  uint64_t next_id_ = 1;
  std::deque<std::shared_ptr<SubRequest>> sendq_;
  size_t send_offset_ = 0;  // bytes of sendq_.front() already written
  std::unordered_map<uint64_t, std::shared_ptr<SubRequest>> inflight_;
  // reply reading
  FrameHeader hdr_;
  size_t hdr_got_ = 0;
  bool in_body_ = false;
  std::shared_ptr<SubRequest> cur_;
  size_t body_got_ = 0;
  std::vector<iovec> segs_;  // the current reply's destinations, in order
  size_t seg_ = 0, seg_off_ = 0;
  bool cur_is_error_ = false;
  ByteBuffer stage_;
  size_t stage_pos_ = 0, stage_len_ = 0;
};

}  // namespace pscore::ps
