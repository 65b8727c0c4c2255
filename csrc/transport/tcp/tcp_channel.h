// A Channel over two non-blocking TCP sockets, one per direction, with a small staging area for
// in-place consumers.
#pragma once

#include <string>
#include <vector>

#include "common/socket.h"
#include "transport/channel.h"

namespace pscore {

class TcpChannel : public Channel {
 public:
  TcpChannel(Socket tx, Socket rx, std::string peer_name);
  size_t write_some(const void* a, size_t na, const void* b, size_t nb) override;
  size_t read_some(size_t max, size_t granule, const Sink& sink) override;
  size_t peek(void* dst, size_t n) override;
  size_t read_header(void* header, size_t header_bytes, size_t rest_bytes) override;
  int tx_fd() const { return tx_.fd(); }
  int rx_fd() const { return rx_.fd(); }
  void shutdown();

 private:
  Socket tx_;
  Socket rx_;
  std::string peer_name_;
  // Bytes read ahead of the reader: for a consume-sink, a partial element; behind a header read
  // with its message, the rest of the message and what arrived behind it (the next messages);
  // for a peek, a header. carried_ of them, from staging_[carried_at_].
  std::vector<char> staging_;
  size_t carried_ = 0;
  size_t carried_at_ = 0;
  char* carried() { return staging_.data() + carried_at_; }
  size_t stage_behind_carried(size_t upto);
  void hand_over(size_t n, const Sink& sink);
};

}  // namespace pscore
