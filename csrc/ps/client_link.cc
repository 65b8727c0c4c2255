#include "ps/client_link.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "common/error.h"
#include "ps/byte_codec.h"
#include "ps/ps_protocol.h"
#include "ps/shard_state.h"

namespace pscore::ps {
namespace {

constexpr size_t kStageBytes = 64 * 1024;
constexpr size_t kDirectReadBytes = 16 * 1024;
constexpr uint64_t kMaxErrorBytes = 64 * 1024;

}  // namespace

ClientLink::ClientLink(int shard, std::string address, Socket sock, uint64_t incarnation,
                       uint64_t max_reply_bytes)
    : shard_(shard),
      name_("shard " + std::to_string(shard) + " (" + address + ")"),
      sock_(std::move(sock)),
      incarnation_(incarnation),
      max_reply_bytes_(max_reply_bytes),
      stage_(kStageBytes) {}

void ClientLink::enqueue(const std::shared_ptr<SubRequest>& s) {
  s->header.seq = next_id_++;
  uint64_t n = s->prefix.size();
  for (const auto& p : s->parts) n += p.second;
  s->header.length = n;
  s->sending = true;
  inflight_[s->header.seq] = s;
  sendq_.push_back(s);
}

bool ClientLink::write_some(std::string* why) {
  while (!sendq_.empty()) {
    iovec iov[64];
    int n = 0;
    size_t skip = send_offset_;
    for (auto it = sendq_.begin(); it != sendq_.end() && n < 60; ++it) {
      SubRequest& s = **it;
      auto add = [&](const void* p, size_t len) {
        if (len == 0 || n >= 63) return;
        if (skip >= len) {
          skip -= len;
          return;
        }
        iov[n++] = {const_cast<uint8_t*>(static_cast<const uint8_t*>(p)) + skip, len - skip};
        skip = 0;
      };
      add(&s.header, sizeof(FrameHeader));
      add(s.prefix.data(), s.prefix.size());
      for (const auto& part : s.parts) add(part.first, part.second);
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t k = ::sendmsg(sock_.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      *why = errno_message("send", errno);
      return false;
    }
    size_t left = static_cast<size_t>(k);
    while (left > 0 && !sendq_.empty()) {
      const SubRequest& s = *sendq_.front();
      size_t total = sizeof(FrameHeader) + s.header.length;
      size_t take = std::min(left, total - send_offset_);
      send_offset_ += take;
      left -= take;
      if (send_offset_ == total) {
        sendq_.pop_front();
        send_offset_ = 0;
      }
    }
  }
  return true;
}

bool ClientLink::begin_body(std::string* why) {
  auto it = inflight_.find(hdr_.seq);
  if (it == inflight_.end()) {
    *why = "reply to unknown request id " + std::to_string(hdr_.seq);
    return false;
  }
  cur_ = it->second;
  body_got_ = 0;
  in_body_ = true;
  SubRequest& s = *cur_;
  cur_is_error_ = hdr_.type == static_cast<uint8_t>(MsgType::kError);
  if (!cur_is_error_ && hdr_.type != static_cast<uint8_t>(MsgType::kReply)) {
    *why = std::string("unexpected frame type ") + msg_type_name(hdr_.type);
    return false;
  }
  if (cur_is_error_ || s.variable_reply) {
    uint64_t cap = cur_is_error_ ? kMaxErrorBytes : max_reply_bytes_;
    if (hdr_.length > cap) {
      *why = "reply of " + std::to_string(hdr_.length) + " bytes exceeds " + std::to_string(cap);
      return false;
    }
    s.reply.resize(hdr_.length);
    return true;
  }
  if (hdr_.length != s.reply_prefix_bytes + s.direct_bytes) {
    *why = s.what + ": reply of " + std::to_string(hdr_.length) + " bytes, expected " +
           std::to_string(s.reply_prefix_bytes + s.direct_bytes);
    return false;
  }
  s.reply.resize(s.reply_prefix_bytes);
  return true;
}

size_t ClientLink::body_room(uint8_t** at) {
  SubRequest& s = *cur_;
  if (cur_is_error_ || s.variable_reply || body_got_ < s.reply_prefix_bytes) {
    *at = s.reply.data() + body_got_;
    return s.reply.size() - body_got_;
  }
  size_t off = body_got_ - s.reply_prefix_bytes;
  *at = s.direct + off;
  return s.direct_bytes - off;
}

void ClientLink::complete_current(std::vector<std::shared_ptr<SubRequest>>& done) {
  inflight_.erase(cur_->header.seq);
  if (cur_is_error_) {
    SubRequest& s = *cur_;
    uint32_t code = 0;
    std::string msg = "malformed error reply";
    try {
      ByteReader r(s.reply.data(), s.reply.size(), "error reply");
      code = r.get<uint32_t>();
      msg = r.get_string();
    } catch (const std::exception&) {
    }
    std::string full = s.what + " on " + name_ + " failed: " + msg;
    if (code == static_cast<uint32_t>(ErrorCode::kInvalidArgument))
      s.error = std::make_exception_ptr(std::invalid_argument(full));
    else if (code == static_cast<uint32_t>(ErrorCode::kNotFound))
      s.error = std::make_exception_ptr(TableNotFound(full));
    else
      s.error = std::make_exception_ptr(Error(full));
    s.retryable_error = false;
  }
  done.push_back(std::move(cur_));
  cur_.reset();
  in_body_ = false;
  hdr_got_ = 0;
}

bool ClientLink::read_some(std::string* why, std::vector<std::shared_ptr<SubRequest>>& done) {
  for (;;) {
    while (stage_pos_ < stage_len_) {
      const size_t avail = stage_len_ - stage_pos_;
      if (!in_body_) {
        size_t take = std::min(avail, sizeof(hdr_) - hdr_got_);
        std::memcpy(reinterpret_cast<uint8_t*>(&hdr_) + hdr_got_, stage_.data() + stage_pos_, take);
        hdr_got_ += take;
        stage_pos_ += take;
        if (hdr_got_ < sizeof(hdr_)) continue;
        if (hdr_.magic != kFrameMagic || hdr_.version != kFrameVersion) {
          *why = "bad frame from the server (magic/version)";
          return false;
        }
        if (!begin_body(why)) return false;
      } else {
        uint8_t* at = nullptr;
        size_t take = std::min(avail, body_room(&at));
        std::memcpy(at, stage_.data() + stage_pos_, take);
        body_got_ += take;
        stage_pos_ += take;
      }
      if (in_body_ && body_got_ == hdr_.length) complete_current(done);
    }
    ssize_t k;
    uint8_t* at = nullptr;
    bool direct = in_body_ && hdr_.length - body_got_ >= kDirectReadBytes &&
                  body_room(&at) >= kDirectReadBytes;
    if (direct)
      k = ::recv(sock_.fd(), at, body_room(&at), MSG_DONTWAIT);
    else
      k = ::recv(sock_.fd(), stage_.data(), kStageBytes, MSG_DONTWAIT);
    if (k > 0) {
      if (direct) {
        body_got_ += static_cast<size_t>(k);
        if (body_got_ == hdr_.length) complete_current(done);
      } else {
        stage_pos_ = 0;
        stage_len_ = static_cast<size_t>(k);
      }
      continue;
    }
    if (k == 0) {
      *why = "connection closed by the server";
      return false;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    if (errno == EINTR) continue;
    *why = errno_message("recv", errno);
    return false;
  }
}

std::vector<std::shared_ptr<SubRequest>> ClientLink::take_all() {
  std::vector<std::shared_ptr<SubRequest>> out;
  for (auto& [id, s] : inflight_) out.push_back(s);
  inflight_.clear();
  sendq_.clear();
  send_offset_ = 0;
  cur_.reset();
  in_body_ = false;
  hdr_got_ = 0;
  stage_pos_ = stage_len_ = 0;
  return out;
}

int64_t ClientLink::earliest_deadline() const {
  int64_t d = INT64_MAX;
  for (const auto& [id, s] : inflight_) d = std::min(d, s->deadline_us);
  return d;
}

}  // namespace pscore::ps
