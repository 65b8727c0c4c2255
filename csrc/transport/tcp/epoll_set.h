// Sleeps until one of a caller's sockets is ready, through an epoll instance whose interest list
// follows the caller's wait sets. A socket is added or changed when a wait asks for it, and
// disarmed only when it reports readiness no wait asked for, so an exchange that waits on the
// same sockets again and again costs one epoll_wait per sleep and no epoll_ctl. Not
// thread-safe: one waiter at a time.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace pscore {

class EpollSet {
 public:
  EpollSet();  // throws NetworkError when the kernel refuses an epoll instance
  ~EpollSet();
  EpollSet(const EpollSet&) = delete;
  EpollSet& operator=(const EpollSet&) = delete;

  // Blocks until one of `wanted` (fd with POLLIN and/or POLLOUT) is ready, has failed or hung
  // up, or timeout_ms passes (a signal may end it early; callers re-check their sockets).
  void wait(const std::vector<pollfd>& wanted, int timeout_ms);

  // Sockets registered with events armed.
  size_t armed() const;

 private:
  void arm(const std::vector<pollfd>& wanted);
  void control(int op, int fd, uint32_t events);
  void disarm(int fd, uint32_t reported);

  int epfd_ = -1;
  std::unordered_map<int, uint32_t> armed_;  // fd -> the epoll events it is registered for
};

}  // namespace pscore
