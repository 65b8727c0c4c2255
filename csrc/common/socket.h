// Thin RAII wrapper over TCP sockets: listen, connect with retry, and blocking-with-deadline I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/clock.h"

namespace pscore {

// Owns one file descriptor; closes it on destruction. Movable, not copyable.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  int release();

  // Binds and listens on host:port (port 0 picks a free one). Throws NetworkError naming the
  // address when the port is busy or the host does not resolve.
  static Socket listen(const std::string& host, int port, int backlog = 128);
  // Connects to host:port, retrying refused connections until the deadline. `who` names the
  // peer in errors ("rank 2", "store").
  static Socket connect(const std::string& host, int port, const Deadline& deadline,
                        const std::string& who);
  // Accepts one connection, waiting at most until the deadline.
  Socket accept(const Deadline& deadline) const;

  int local_port() const;
  std::string peer_address() const;

  void set_nonblocking(bool on) const;
  void set_nodelay() const;
  void set_buffer_bytes(int nbytes) const;

  // Writes/reads exactly n bytes or throws (TimeoutError past the deadline, NetworkError when the
  // peer closes or errors). Works on blocking and non-blocking sockets.
  void send_all(const void* buf, size_t n, const Deadline& deadline, const std::string& what) const;
  void recv_all(void* buf, size_t n, const Deadline& deadline, const std::string& what) const;

 private:
  int fd_ = -1;
};

// True when host names this machine's loopback (127.0.0.0/8, ::1, "localhost").
bool is_loopback_host(const std::string& host);

}  // namespace pscore
