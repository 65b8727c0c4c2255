#include "store/store_connection.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace pscore {

namespace {
constexpr size_t kReadChunk = 64 * 1024;
// Bytes taken per readiness event, so garbage is judged before much of it is buffered; the
// level-triggered poller reports the rest on its next turn.
constexpr size_t kMaxReadPerEvent = 16 * kReadChunk;
}  // namespace

StoreConnection::StoreConnection(Socket socket, uint64_t max_payload_bytes)
    : socket_(std::move(socket)), max_payload_(max_payload_bytes) {
  address_ = socket_.peer_address();
  peer_ = "TCPStore client " + address_;
  socket_.set_nonblocking(true);
  socket_.set_nodelay();
}

bool StoreConnection::read_available() {
  if (in_pos_ > 0 && in_pos_ == in_.size()) {
    in_.clear();
    in_pos_ = 0;
  }
  // One server thread reads all connections: a scratch buffer saves zero-filling in_ per read.
  static thread_local char scratch[kReadChunk];
  for (size_t taken = 0; taken < kMaxReadPerEvent;) {
    ssize_t k = ::recv(socket_.fd(), scratch, kReadChunk, MSG_DONTWAIT);
    if (k > 0) {
      in_.append(scratch, static_cast<size_t>(k));
      taken += static_cast<size_t>(k);
      if (static_cast<size_t>(k) < kReadChunk) return true;  // drained for now
      continue;
    }
    if (k == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

bool StoreConnection::next_frame(FrameHeader* header, std::string* payload) {
  size_t avail = in_.size() - in_pos_;
  if (avail < sizeof(FrameHeader)) return false;
  std::memcpy(header, in_.data() + in_pos_, sizeof(FrameHeader));
  validate_frame(*header, max_payload_, peer_);
  if (avail - sizeof(FrameHeader) < header->length) return false;
  const char* start = in_.data() + in_pos_ + sizeof(FrameHeader);
  payload->assign(start, header->length);
  in_pos_ += sizeof(FrameHeader) + header->length;
  if (in_pos_ == in_.size()) {
    in_.clear();
    in_pos_ = 0;
  }
  return true;
}

bool StoreConnection::flush() {
  while (out_pos_ < out_.size()) {
    ssize_t k = ::send(socket_.fd(), out_.data() + out_pos_, out_.size() - out_pos_,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      out_pos_ += static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;
  }
  out_.clear();
  out_pos_ = 0;
  return true;
}

}  // namespace pscore
