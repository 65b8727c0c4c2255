#include "ps/client/client_link.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "common/error.h"
#include "common/wire_codec.h"
#include "ps/wire/ps_protocol.h"

namespace pscore::ps {
namespace {

constexpr size_t kStageBytes = 64 * 1024;
constexpr size_t kDirectReadBytes = 16 * 1024;
constexpr int kMaxIov = 1024;  // IOV_MAX
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
  const uint64_t id = s->header.seq;  // FrameHeader is packed: no references into it
  inflight_[id] = s;
  sendq_.push_back(s);
}

bool ClientLink::write_some(std::string* why) {
  std::vector<iovec> iov;
  iov.reserve(kMaxIov);
  while (!sendq_.empty()) {
    iov.clear();
    size_t skip = send_offset_;
    for (auto it = sendq_.begin(); it != sendq_.end() && iov.size() < kMaxIov; ++it) {
      SubRequest& s = **it;
      auto add = [&](const void* p, size_t len) {
        if (len == 0 || iov.size() >= kMaxIov) return;
        if (skip >= len) {
          skip -= len;
          return;
        }
        iov.push_back({const_cast<uint8_t*>(static_cast<const uint8_t*>(p)) + skip, len - skip});
        skip = 0;
      };
      add(&s.header, sizeof(FrameHeader));
      add(s.prefix.data(), s.prefix.size());
      for (const auto& part : s.parts) add(part.first, part.second);
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = iov.size();
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
  const uint64_t id = hdr_.seq;
  auto it = inflight_.find(id);
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
  segs_.clear();
  seg_ = seg_off_ = 0;
  if (cur_is_error_ || s.variable_reply) {
    uint64_t cap = cur_is_error_ ? kMaxErrorBytes : max_reply_bytes_;
    if (hdr_.length > cap) {
      *why = "reply of " + std::to_string(hdr_.length) + " bytes exceeds " + std::to_string(cap);
      return false;
    }
    s.reply.resize(hdr_.length);
    segs_.push_back({s.reply.data(), s.reply.size()});
    return true;
  }
  if (hdr_.length != s.reply_prefix_bytes + s.direct_bytes) {
    *why = s.what + ": reply of " + std::to_string(hdr_.length) + " bytes, expected " +
           std::to_string(s.reply_prefix_bytes + s.direct_bytes);
    return false;
  }
  s.reply.resize(s.reply_prefix_bytes);
  if (s.reply_prefix_bytes) segs_.push_back({s.reply.data(), s.reply_prefix_bytes});
  if (!s.scatter.empty()) {
    for (const auto& [p, n] : s.scatter)
      if (n) segs_.push_back({p, n});
  } else if (s.direct_bytes) {
    segs_.push_back({s.direct, s.direct_bytes});
  }
  return true;
}

int ClientLink::body_iov(iovec* out, int max) const {
  int n = 0;
  for (size_t i = seg_; i < segs_.size() && n < max; ++i) {
    size_t off = i == seg_ ? seg_off_ : 0;
    out[n++] = {static_cast<uint8_t*>(segs_[i].iov_base) + off, segs_[i].iov_len - off};
  }
  return n;
}

void ClientLink::body_advance(size_t n) {
  body_got_ += n;
  while (n > 0 && seg_ < segs_.size()) {
    size_t take = std::min(segs_[seg_].iov_len - seg_off_, n);
    seg_off_ += take;
    n -= take;
    if (seg_off_ == segs_[seg_].iov_len) {
      ++seg_;
      seg_off_ = 0;
    }
  }
}

void ClientLink::complete_current(std::vector<std::shared_ptr<SubRequest>>& done) {
  const uint64_t id = cur_->header.seq;
  inflight_.erase(id);
  if (cur_is_error_) {
    SubRequest& s = *cur_;
    uint32_t code = 0;
    std::string msg = "malformed error reply";
    try {
      WireReader r(s.reply.data(), s.reply.size(), "error reply");
      code = r.u32("error code");
      msg = r.string("message", 1 << 16);
    } catch (const std::exception&) {
    }
    std::string full = s.what + " on " + name_ + " failed: " + msg;
    if (code == static_cast<uint32_t>(ErrorCode::kInvalidArgument))
      s.error = std::make_exception_ptr(std::invalid_argument(full));
    else if (code == static_cast<uint32_t>(ErrorCode::kNotFound)) {
      s.error = std::make_exception_ptr(TableNotFound(full));
      s.table_missing = msg;
    } else
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
        iovec at{nullptr, 0};
        size_t take = body_iov(&at, 1) ? std::min(avail, at.iov_len) : 0;
        if (take) std::memcpy(at.iov_base, stage_.data() + stage_pos_, take);
        body_advance(take);
        stage_pos_ += take;
      }
      if (in_body_ && body_got_ == hdr_.length) complete_current(done);
    }
    ssize_t k;
    const bool direct = in_body_ && hdr_.length - body_got_ >= kDirectReadBytes;
    if (direct) {
      iovec iov[kMaxIov];
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(body_iov(iov, kMaxIov));
      k = ::recvmsg(sock_.fd(), &msg, MSG_DONTWAIT);
    } else {
      k = ::recv(sock_.fd(), stage_.data(), kStageBytes, MSG_DONTWAIT);
    }
    if (k > 0) {
      if (direct) {
        body_advance(static_cast<size_t>(k));
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
