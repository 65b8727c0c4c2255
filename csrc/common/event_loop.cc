#include "common/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "common/error.h"

namespace pscore {
namespace {
constexpr int kMaxEvents = 64;
}  // namespace

EventLoop::EventLoop(std::string name) : name_(std::move(name)) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw NetworkError(errno_message(name_ + ": epoll_create1", errno));
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    int err = errno;
    ::close(epoll_fd_);
    throw NetworkError(errno_message(name_ + ": eventfd", err));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    int err = errno;
    ::close(wake_fd_);
    ::close(epoll_fd_);
    throw NetworkError(errno_message(name_ + ": epoll_ctl add", err));
  }
}

EventLoop::~EventLoop() {
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void EventLoop::control(int op, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, op, fd, &ev) != 0) {
    const char* what = op == EPOLL_CTL_ADD ? ": epoll_ctl add" : ": epoll_ctl modify";
    throw NetworkError(errno_message(name_ + what, errno));
  }
}

void EventLoop::add(int fd, uint32_t events, Handler on_ready) {
  auto watch = std::make_shared<Watch>(Watch{std::move(on_ready), 0});
  std::lock_guard<std::mutex> lk(watches_mu_);
  control(EPOLL_CTL_ADD, fd, events);
  // Read after the registration: a turn that began before it sees the number it had then.
  watch->added_turn = turn_.load();
  watches_[fd] = std::move(watch);
}

// epoll_ctl alone: the registration's callback does not change.
void EventLoop::modify(int fd, uint32_t events) { control(EPOLL_CTL_MOD, fd, events); }

void EventLoop::remove(int fd) {
  std::lock_guard<std::mutex> lk(watches_mu_);
  if (watches_.erase(fd) == 0) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

EventLoop::TimerId EventLoop::add_timer(Clock::time_point at, Task task) {
  TimerId id{at, next_timer_++};
  timers_.emplace(id, std::move(task));
  return id;
}

void EventLoop::cancel_timer(const TimerId& id) { timers_.erase(id); }

void EventLoop::post(Task task) {
  bool first;
  {
    std::lock_guard<std::mutex> lk(tasks_mu_);
    first = tasks_.empty();
    tasks_.push_back(std::move(task));
    has_tasks_ = true;
  }
  // The loop thread runs its own posts at the end of the turn; others wake it, once per batch.
  if (first && !in_loop_thread()) wake();
}

void EventLoop::stop() {
  stopped_ = true;
  wake();
}

void EventLoop::wake() {
  uint64_t one = 1;
  ssize_t k = ::write(wake_fd_, &one, sizeof(one));
  (void)k;  // a full counter (EAGAIN) wakes the loop just as well
}

int EventLoop::next_timeout_ms() const {
  if (timers_.empty()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(timers_.begin()->first.first -
                                                                    Clock::now())
                  .count();
  // Rounded up, so a timer never fires before its time.
  return left < 0 ? 0 : static_cast<int>(std::min<int64_t>(left + 1, INT_MAX));
}

void EventLoop::dispatch(const epoll_event& ev, uint64_t turn) {
  if (ev.data.fd == wake_fd_) {
    uint64_t v;
    ssize_t k = ::read(wake_fd_, &v, sizeof(v));
    (void)k;
    return;
  }
  std::shared_ptr<Watch> w;  // alive while its callback runs, removed or not
  {
    std::lock_guard<std::mutex> lk(watches_mu_);
    auto it = watches_.find(ev.data.fd);
    // Removed since the turn began, or removed and its number reused by a new registration.
    if (it == watches_.end() || it->second->added_turn == turn) return;
    w = it->second;
  }
  w->on_ready(ev.events);
}

void EventLoop::fire_timers() {
  const auto now = Clock::now();
  while (!timers_.empty() && timers_.begin()->first.first <= now) {
    Task task = std::move(timers_.begin()->second);
    timers_.erase(timers_.begin());
    task();
  }
}

void EventLoop::run_tasks() {
  if (!has_tasks_) return;
  std::vector<Task> tasks;
  {
    std::lock_guard<std::mutex> lk(tasks_mu_);
    tasks.swap(tasks_);
    has_tasks_ = false;
  }
  for (auto& task : tasks) task();
}

void EventLoop::run() {
  loop_thread_ = std::this_thread::get_id();
  epoll_event events[kMaxEvents];
  while (!stopped_) {
    // A task posted by a task of the last turn runs without waiting for another wakeup.
    const int timeout = has_tasks_ ? 0 : next_timeout_ms();
    // Registrations made from here on belong to this turn: its events are not theirs.
    const uint64_t turn = ++turn_;
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, timeout);
    if (n < 0 && errno != EINTR) break;  // cannot happen with a valid epoll fd
    for (int i = 0; i < n && !stopped_; ++i) dispatch(events[i], turn);
    fire_timers();
    run_tasks();
  }
  loop_thread_ = std::thread::id();
}

}  // namespace pscore
