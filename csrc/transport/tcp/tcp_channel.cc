#include "transport/tcp/tcp_channel.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace pscore {
namespace {
constexpr size_t kStagingBytes = 1 << 20;

[[noreturn]] void throw_io(const std::string& peer, const char* op, int err) {
  // EOF, or the reset of a peer that aborted the group (shutdown() below) or died with bytes
  // unread.
  if (err == 0 || err == ECONNRESET || err == EPIPE)
    throw NetworkError("connection closed by " + peer + " (it aborted the group, exited or died)");
  throw NetworkError(errno_message(std::string(op) + " to/from " + peer, err));
}

// recv() without blocking: the bytes received (0 when none have arrived); throws when the peer
// closed the connection or it failed.
size_t recv_available(int fd, void* dst, size_t n, int flags, const std::string& peer) {
  for (;;) {
    ssize_t k = ::recv(fd, dst, n, flags | MSG_DONTWAIT);
    if (k > 0) return static_cast<size_t>(k);
    if (k == 0) throw_io(peer, "recv", 0);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw_io(peer, "recv", errno);
  }
}
}  // namespace

TcpChannel::TcpChannel(Socket tx, Socket rx, std::string peer_name)
    : tx_(std::move(tx)),
      rx_(std::move(rx)),
      peer_name_(std::move(peer_name)),
      staging_(kStagingBytes) {
  for (const Socket* s : {&tx_, &rx_}) {
    s->set_nonblocking(true);
    s->set_nodelay();
  }
}

size_t TcpChannel::write_some(const void* a, size_t na, const void* b, size_t nb) {
  iovec iov[2];
  int cnt = 0;
  if (na) iov[cnt++] = {const_cast<void*>(a), na};
  if (nb) iov[cnt++] = {const_cast<void*>(b), nb};
  if (cnt == 0) return 0;
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = cnt;
  for (;;) {
    ssize_t k = ::sendmsg(tx_.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw_io(peer_name_, "send", errno);
  }
}

size_t TcpChannel::peek(void* dst, size_t n) {
  if (carried_ > 0) {  // only mid-message; MSG_PEEK cannot look past the staged bytes
    const size_t k = std::min(n, carried_);
    std::memcpy(dst, staging_.data(), k);
    return k;
  }
  return recv_available(rx_.fd(), dst, n, MSG_PEEK, peer_name_);
}

size_t TcpChannel::read_some(size_t max, size_t granule, const Sink& sink) {
  if (max == 0) return 0;
  if (sink.direct) return recv_available(rx_.fd(), sink.direct, max, 0, peer_name_);
  // Consumers take whole elements: stage, hand over the aligned part, carry the remainder.
  size_t want = std::min(max, staging_.size()) - carried_;
  const size_t k = recv_available(rx_.fd(), staging_.data() + carried_, want, 0, peer_name_);
  if (k == 0) return 0;
  size_t have = carried_ + k;
  size_t aligned = have & ~(granule - 1);
  if (aligned) sink.consume(staging_.data(), aligned);
  carried_ = have - aligned;
  if (carried_) std::memmove(staging_.data(), staging_.data() + aligned, carried_);
  // The carried bytes are owed to the caller; they count once they are handed over.
  return aligned;
}

// Resets both connections (connect(AF_UNSPEC) disconnects a TCP socket with an RST), so the
// peer fails its next send or receive at once, even if it was stopped meanwhile and only
// sends (a broadcast's root): after a plain FIN its sends would still be taken into its socket
// buffer. The descriptors stay open, so threads still using them just see errors.
void TcpChannel::shutdown() {
  sockaddr unspec{};
  unspec.sa_family = AF_UNSPEC;
  for (const Socket* s : {&tx_, &rx_}) {
    if (!s->valid()) continue;
    if (::connect(s->fd(), &unspec, sizeof(unspec)) != 0) ::shutdown(s->fd(), SHUT_RDWR);
  }
}

}  // namespace pscore
