#include "ps/server/server_connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/error.h"
#include "ps/wire/ps_protocol.h"

namespace pscore::ps {
namespace {

constexpr size_t kStageBytes = 64 * 1024;
// Bodies with at least this much left are received straight into their buffer.
constexpr size_t kDirectReadBytes = 16 * 1024;

}  // namespace

ServerConnection::ServerConnection(Socket sock, uint64_t id, EventLoop* events, ServerStats* stats)
    : sock_(std::move(sock)),
      id_(id),
      events_(events),
      stats_(stats),
      stage_buf_(new uint8_t[kStageBytes]) {
  peer_ = sock_.peer_address();
  opened_us = now_us();
}

ServerConnection::FrameAction ServerConnection::consume(
    const uint8_t* p, size_t n, size_t* used, const std::function<FrameAction(InFrame&&)>& on_frame,
    uint64_t cap) {
  *used = 0;
  if (!in_body_) {
    size_t take = std::min(n, sizeof(hdr_) - hdr_got_);
    std::memcpy(reinterpret_cast<uint8_t*>(&hdr_) + hdr_got_, p, take);
    hdr_got_ += take;
    *used = take;
    if (hdr_got_ < sizeof(hdr_)) return FrameAction::kContinue;
    validate_frame(hdr_, cap, "client " + peer_);
    body_.resize(static_cast<size_t>(hdr_.length));
    body_got_ = 0;
    in_body_ = true;
  } else {
    size_t take = std::min(n, body_.size() - body_got_);
    if (take) std::memcpy(body_.data() + body_got_, p, take);
    body_got_ += take;
    *used = take;
  }
  if (body_got_ < body_.size()) return FrameAction::kContinue;
  InFrame f{hdr_, std::move(body_), now_us()};
  body_ = ByteBuffer();
  hdr_got_ = 0;
  in_body_ = false;
  return on_frame(std::move(f));
}

ServerConnection::ReadResult ServerConnection::read_available(
    const std::function<FrameAction(InFrame&&)>& on_frame, uint64_t max_frame_bytes,
    std::string* why) {
  auto cap_now = [&] { return stage == Stage::kReady ? max_frame_bytes : kMaxHandshakeBytes; };
  for (;;) {
    while (stage_pos_ < stage_len_) {
      size_t used = 0;
      const uint64_t cap = cap_now();
      FrameAction a =
          consume(stage_buf_.get() + stage_pos_, stage_len_ - stage_pos_, &used, on_frame, cap);
      stage_pos_ += used;
      if (a == FrameAction::kClose) {
        *why = close_reason.empty() ? "handshake failure" : close_reason;
        return ReadResult::kClosed;
      }
      if (a == FrameAction::kPause) return ReadResult::kPaused;
    }
    ssize_t k;
    bool direct = in_body_ && body_.size() - body_got_ >= kDirectReadBytes;
    if (direct)
      k = ::recv(sock_.fd(), body_.data() + body_got_, body_.size() - body_got_, MSG_DONTWAIT);
    else
      k = ::recv(sock_.fd(), stage_buf_.get(), kStageBytes, MSG_DONTWAIT);
    if (k > 0) {
      stats_->bytes_in.fetch_add(static_cast<uint64_t>(k), std::memory_order_relaxed);
      if (direct) {
        body_got_ += static_cast<size_t>(k);
        if (body_got_ == body_.size()) {
          size_t used = 0;
          FrameAction a = consume(nullptr, 0, &used, on_frame, cap_now());
          if (a == FrameAction::kClose) {
            *why = close_reason.empty() ? "handshake failure" : close_reason;
            return ReadResult::kClosed;
          }
          if (a == FrameAction::kPause) return ReadResult::kPaused;
        }
      } else {
        stage_pos_ = 0;
        stage_len_ = static_cast<size_t>(k);
      }
      continue;
    }
    if (k == 0) {
      bool mid_frame = in_body_ || hdr_got_ > 0;
      *why = mid_frame ? "truncated frame: the peer closed in the middle of a frame"
                       : "closed by peer";
      return ReadResult::kClosed;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadResult::kOpen;
    if (errno == EINTR) continue;
    *why = errno_message("recv", errno);
    return ReadResult::kClosed;
  }
}

void ServerConnection::update_events_locked() {
  if (closed_) return;
  events_->modify(sock_.fd(),
                  (reading ? uint32_t(EPOLLIN) : 0u) | (want_write_ ? uint32_t(EPOLLOUT) : 0u));
}

bool ServerConnection::flush_locked() {
  while (!outbox_.empty()) {
    iovec iov[64];
    int n = 0;
    for (auto it = outbox_.begin(); it != outbox_.end() && n < 63; ++it) {
      size_t sent = it->sent;
      if (sent < sizeof(FrameHeader)) {
        iov[n++] = {reinterpret_cast<uint8_t*>(&it->header) + sent, sizeof(FrameHeader) - sent};
        sent = sizeof(FrameHeader);
      }
      size_t body_off = sent - sizeof(FrameHeader);
      if (body_off < it->body.size())
        iov[n++] = {it->body.data() + body_off, it->body.size() - body_off};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t k = ::sendmsg(sock_.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      return false;
    }
    stats_->bytes_out.fetch_add(static_cast<uint64_t>(k), std::memory_order_relaxed);
    size_t left = static_cast<size_t>(k);
    outbox_bytes_ -= left;
    while (left > 0 && !outbox_.empty()) {
      OutFrame& f = outbox_.front();
      size_t total = sizeof(FrameHeader) + f.body.size();
      size_t take = std::min(left, total - f.sent);
      f.sent += take;
      left -= take;
      if (f.sent == total) outbox_.pop_front();
    }
  }
  return true;
}

void ServerConnection::send(const FrameHeader& h, ByteBuffer&& body) {
  std::lock_guard<std::mutex> lk(mu);
  if (closed_) return;
  outbox_bytes_ += sizeof(FrameHeader) + body.size();
  outbox_.push_back(OutFrame{h, std::move(body), 0});
  if (want_write_) return;
  if (!flush_locked()) {
    closed_ = true;
    ::shutdown(sock_.fd(), SHUT_RDWR);
    return;
  }
  if (!outbox_.empty()) {
    want_write_ = true;
    update_events_locked();
  }
}

bool ServerConnection::on_writable(uint64_t resume_below_bytes) {
  std::lock_guard<std::mutex> lk(mu);
  if (closed_) return false;
  if (!flush_locked()) {
    closed_ = true;
    ::shutdown(sock_.fd(), SHUT_RDWR);
    return false;
  }
  if (outbox_.empty() && want_write_) {
    want_write_ = false;
    update_events_locked();
  }
  if (output_blocked && outbox_bytes_ < resume_below_bytes) {
    output_blocked = false;
    return !queue.empty() && !scheduled;
  }
  return false;
}

void ServerConnection::set_reading(bool on) {
  std::lock_guard<std::mutex> lk(mu);
  set_reading_locked(on);
}

void ServerConnection::set_reading_locked(bool on) {
  reading = on;
  update_events_locked();
}

void ServerConnection::close() {
  std::lock_guard<std::mutex> lk(mu);
  if (closed_) return;
  closed_ = true;
  stats_->queue_depth.fetch_sub(static_cast<int64_t>(queue.size()));
  queue.clear();
  queued_bytes = 0;
  outbox_.clear();
  outbox_bytes_ = 0;
  events_->remove(sock_.fd());
  ::shutdown(sock_.fd(), SHUT_RDWR);
}

bool ServerConnection::closed() {
  std::lock_guard<std::mutex> lk(mu);
  return closed_;
}

size_t ServerConnection::outbox_bytes() {
  std::lock_guard<std::mutex> lk(mu);
  return outbox_bytes_;
}

}  // namespace pscore::ps
