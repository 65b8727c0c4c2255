#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace pscore {
namespace {

struct AddrInfo {
  addrinfo* head = nullptr;
  ~AddrInfo() {
    if (head) freeaddrinfo(head);
  }
};

void resolve(const std::string& host, int port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  std::string service = std::to_string(port);
  const char* node = host.empty() ? nullptr : host.c_str();
  int rc = getaddrinfo(node, service.c_str(), &hints, &out.head);
  if (rc != 0) throw NetworkError("cannot resolve host '" + host + "': " + gai_strerror(rc));
}

// Waits for `events` on fd until the deadline; throws TimeoutError naming `what`.
void wait_fd(int fd, short events, const Deadline& deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc > 0) return;
    if (rc == 0) throw TimeoutError(what + ": timed out");
    if (errno != EINTR) throw NetworkError(errno_message(what + ": poll", errno));
  }
}

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

Socket Socket::listen(const std::string& host, int port, int backlog) {
  AddrInfo ai;
  resolve(host, port, true, ai);
  int last_err = 0;
  for (addrinfo* a = ai.head; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      last_err = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(s.fd(), backlog) != 0) {
      last_err = errno;
      continue;
    }
    return s;
  }
  throw NetworkError(
      errno_message("cannot listen on " + host + ":" + std::to_string(port), last_err));
}

Socket Socket::connect(const std::string& host, int port, const Deadline& deadline,
                       const std::string& who) {
  std::string what = "connect to " + who + " at " + host + ":" + std::to_string(port);
  int delay_ms = 1;
  for (;;) {
    AddrInfo ai;
    resolve(host, port, false, ai);
    int last_err = 0;
    for (addrinfo* a = ai.head; a; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.valid()) {
        last_err = errno;
        continue;
      }
      s.set_nonblocking(true);
      int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{s.fd(), POLLOUT, 0};
        rc = ::poll(&p, 1, deadline.remaining_ms());
        if (rc == 0) throw TimeoutError(what + ": timed out");
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        s.set_nonblocking(false);
        return s;
      }
      last_err = errno;
    }
    if (deadline.expired()) throw TimeoutError(errno_message(what + ": timed out", last_err));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    delay_ms = std::min(delay_ms * 2, 100);
  }
}

Socket Socket::accept(const Deadline& deadline) const {
  for (;;) {
    wait_fd(fd_, POLLIN, deadline, "accept");
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return Socket(fd);
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
      throw NetworkError(errno_message("accept", errno));
  }
}

int Socket::local_port() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw NetworkError(errno_message("getsockname", errno));
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

std::string Socket::peer_address() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &sa->sin_addr, host, sizeof(host));
    port = ntohs(sa->sin_port);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &sa->sin6_addr, host, sizeof(host));
    port = ntohs(sa->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

void Socket::set_nonblocking(bool on) const {
  int flags = ::fcntl(fd_, F_GETFL, 0);
  ::fcntl(fd_, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void Socket::set_nodelay() const {
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void Socket::set_buffer_bytes(int nbytes) const {
  if (nbytes <= 0) return;  // leave the kernel's autotuning alone
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &nbytes, sizeof(nbytes));
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &nbytes, sizeof(nbytes));
}

void Socket::send_all(const void* buf, size_t n, const Deadline& deadline,
                      const std::string& what) const {
  auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_fd(fd_, POLLOUT, deadline, what);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    throw NetworkError(errno_message(what + ": send failed", errno));
  }
}

void Socket::recv_all(void* buf, size_t n, const Deadline& deadline,
                      const std::string& what) const {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t k = ::recv(fd_, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) throw NetworkError(what + ": connection closed by peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd_, POLLIN, deadline, what);
      continue;
    }
    if (errno == EINTR) continue;
    throw NetworkError(errno_message(what + ": recv failed", errno));
  }
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  return host.rfind("127.", 0) == 0;
}

}  // namespace pscore
