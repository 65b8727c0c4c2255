#include "store/tcp_store_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/error.h"
#include "common/frame.h"

namespace pscore {

using store_wire::Status;

namespace {

constexpr size_t kMaxIdleConnections = 8;
// First read of a reply: header and payload together when the payload is small.
constexpr size_t kFirstReadBytes = 4096;

// Reads one reply frame. It waits for readability before reading (the reply never arrives at
// once), and the first recv takes up to kFirstReadBytes, so a small reply costs one poll and
// one recv. A single request is in flight per connection: bytes past the frame are an error.
void read_reply(int fd, const Deadline& deadline, const std::string& what, const std::string& peer,
                FrameHeader* h, std::string* payload) {
  std::string buf;
  size_t need = kFirstReadBytes;
  bool have_header = false;
  while (!have_header || buf.size() < need) {
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc == 0) throw TimeoutError(what + ": timed out");
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw NetworkError(errno_message(what + ": poll", errno));
    }
    size_t old = buf.size();
    buf.resize(need);
    ssize_t k = ::recv(fd, buf.data() + old, need - old, MSG_DONTWAIT);
    buf.resize(old + (k > 0 ? static_cast<size_t>(k) : 0));
    if (k == 0) throw NetworkError(what + ": connection closed by peer");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw NetworkError(errno_message(what + ": recv failed", errno));
    }
    if (!have_header && buf.size() >= sizeof(FrameHeader)) {
      std::memcpy(h, buf.data(), sizeof(FrameHeader));
      validate_frame(*h, store_wire::kMaxPayloadBytes, peer);
      have_header = true;
      need = sizeof(FrameHeader) + h->length;
      if (buf.size() > need)
        throw NetworkError(peer + ": " + what + ": " + std::to_string(buf.size() - need) +
                           " bytes past the reply frame");
    }
  }
  payload->assign(buf, sizeof(FrameHeader), std::string::npos);
}

}  // namespace

TcpStoreClient::TcpStoreClient(std::string host, int port) : host_(std::move(host)), port_(port) {
  name_ = "TCPStore(" + host_ + ":" + std::to_string(port_) + ")";
}

void TcpStoreClient::connect(const Deadline& deadline) { release(acquire(deadline)); }

Socket TcpStoreClient::acquire(const Deadline& deadline) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      Socket s = std::move(idle_.back());
      idle_.pop_back();
      return s;
    }
  }
  try {
    Socket s = Socket::connect(host_, port_, deadline, "the TCPStore master");
    s.set_nodelay();
    return s;
  } catch (const TimeoutError& e) {
    throw TimeoutError(name_ + ": cannot reach the store master (is rank 0 running and " +
                       "listening there?): " + e.what());
  }
}

void TcpStoreClient::release(Socket socket) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(socket));
}

StoreResponse TcpStoreClient::call(store_wire::Op op, const std::string& payload,
                                   const Deadline& connect_deadline, const Deadline& reply_deadline,
                                   const std::string& what) {
  Socket s = acquire(connect_deadline);
  const Deadline& deadline = reply_deadline;
  uint64_t seq = next_seq_.fetch_add(1);
  StoreResponse r;
  // On any failure the socket is closed, not returned: its stream may be mid-frame.
  try {
    std::string frame = store_wire::encode_frame(static_cast<uint8_t>(op), seq, payload);
    s.send_all(frame.data(), frame.size(), deadline, what);
    FrameHeader h;
    read_reply(s.fd(), deadline, what, name_, &h, &r.payload);
    if (h.seq != seq)
      throw NetworkError(name_ + ": " + what + ": reply carries seq " + std::to_string(h.seq) +
                         ", expected " + std::to_string(seq));
    r.status = static_cast<Status>(h.type);
  } catch (const TimeoutError& e) {
    throw TimeoutError(name_ + ": no reply to " + what + " in time (server hung or " +
                       "unreachable): " + e.what());
  } catch (const NetworkError& e) {
    throw NetworkError(name_ + ": " + what + " failed, connection lost: " + e.what());
  }
  release(std::move(s));
  if (r.status == Status::kInvalid || r.status == Status::kError) {
    store_wire::PayloadReader in(r.payload.data(), r.payload.size(), name_);
    std::string message = in.bytes();
    if (r.status == Status::kInvalid) throw std::invalid_argument(message);
    throw StoreError(name_ + ": " + message);
  }
  if (r.status != Status::kOk && r.status != Status::kTimeout)
    throw NetworkError(name_ + ": " + what + ": unknown reply status " +
                       std::to_string(static_cast<int>(r.status)));
  return r;
}

}  // namespace pscore
