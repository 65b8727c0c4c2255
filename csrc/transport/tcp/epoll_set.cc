#include "transport/tcp/epoll_set.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/clock.h"
#include "common/error.h"

namespace pscore {
namespace {

uint32_t epoll_events(int16_t poll_events) {
  return ((poll_events & POLLIN) ? EPOLLIN : 0u) | ((poll_events & POLLOUT) ? EPOLLOUT : 0u);
}

bool is_wanted(const std::vector<pollfd>& wanted, int fd) {
  return std::any_of(wanted.begin(), wanted.end(), [fd](const pollfd& p) { return p.fd == fd; });
}

}  // namespace

EpollSet::EpollSet() : epfd_(::epoll_create1(EPOLL_CLOEXEC)) {
  if (epfd_ < 0) throw NetworkError(errno_message("epoll_create1", errno));
}

EpollSet::~EpollSet() { ::close(epfd_); }

size_t EpollSet::armed() const {
  return static_cast<size_t>(
      std::count_if(armed_.begin(), armed_.end(), [](const auto& kv) { return kv.second != 0; }));
}

void EpollSet::control(int op, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epfd_, op, fd, &ev) != 0) throw NetworkError(errno_message("epoll_ctl", errno));
}

void EpollSet::arm(const std::vector<pollfd>& wanted) {
  for (const pollfd& p : wanted) {
    const uint32_t events = epoll_events(p.events);
    auto it = armed_.find(p.fd);
    if (it == armed_.end()) {
      control(EPOLL_CTL_ADD, p.fd, events);
      armed_.emplace(p.fd, events);
    } else if (it->second != events) {
      control(EPOLL_CTL_MOD, p.fd, events);
      it->second = events;
    }
  }
}

// A socket an earlier wait asked for reported readiness: its events are cleared (a cheaper
// change than removing and adding it again), or, when it failed or hung up, which epoll reports
// even with no events, it is removed until a wait asks for it again.
void EpollSet::disarm(int fd, uint32_t reported) {
  if (reported & (EPOLLERR | EPOLLHUP)) {
    control(EPOLL_CTL_DEL, fd, 0);
    armed_.erase(fd);
  } else {
    control(EPOLL_CTL_MOD, fd, 0);
    armed_[fd] = 0;
  }
}

void EpollSet::wait(const std::vector<pollfd>& wanted, int timeout_ms) {
  arm(wanted);
  const Deadline deadline(std::max(timeout_ms, 0));
  epoll_event ready[16];
  for (;;) {
    const int n = ::epoll_wait(epfd_, ready, 16, deadline.remaining_ms());
    if (n < 0) {
      if (errno == EINTR) return;
      throw NetworkError(errno_message("epoll_wait", errno));
    }
    if (n == 0) return;
    bool woken = false;
    for (int i = 0; i < n; ++i) {
      const int fd = ready[i].data.fd;
      if (is_wanted(wanted, fd)) {
        woken = true;
      } else {
        disarm(fd, ready[i].events);
      }
    }
    if (woken || deadline.expired()) return;
  }
}

}  // namespace pscore
