// The one event loop every pscore server and the parameter-server client run on: an epoll set
// whose file descriptors each have a callback, one-shot timers, and tasks posted from other
// threads (an eventfd wakes the loop for them). One thread calls run(); callbacks, timers and
// tasks all run on it, in that order within a turn. Level-triggered: a callback that leaves
// data unread is called again on the next turn. An event is delivered only to the registration
// that existed when the turn began, so a descriptor number closed and reused during a turn never
// gets its predecessor's events.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace pscore {

class EventLoop {
 public:
  using Task = std::function<void()>;
  using Handler = std::function<void(uint32_t events)>;  // the epoll events that were reported
  using TimerId = std::pair<Clock::time_point, uint64_t>;

  // `name` prefixes the errors ("TCPStore server: epoll_ctl add: ..."). Throws NetworkError
  // when the kernel refuses an epoll instance or an eventfd.
  explicit EventLoop(std::string name);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // --- any thread ---
  // Watches fd for `events` (EPOLLIN, EPOLLOUT, ...); `on_ready` gets what was reported. Throws
  // NetworkError naming the operation when the kernel refuses.
  void add(int fd, uint32_t events, Handler on_ready);
  // Changes the events a registered fd is watched for. Throws NetworkError like add().
  void modify(int fd, uint32_t events);
  // Stops watching fd; the caller closes it afterwards. Safe inside any callback, its own
  // included: from the loop thread, no event of fd is delivered after it returns. From another
  // thread, a callback already being dispatched may still run once.
  void remove(int fd);
  // Runs `task` on the loop thread after the current turn's callbacks and timers.
  void post(Task task);
  // run() returns after the current turn. Idempotent; works before run() starts too.
  void stop();

  // --- the loop thread (or any thread before run() starts) ---
  // Runs `task` at `at` (or on the next turn when that is past). Cancelling a timer that fired
  // or was cancelled already does nothing.
  TimerId add_timer(Clock::time_point at, Task task);
  void cancel_timer(const TimerId& id);
  // Runs turns until stop(); then returns, dropping the tasks and timers still pending.
  void run();
  bool in_loop_thread() const { return std::this_thread::get_id() == loop_thread_.load(); }

 private:
  struct Watch {
    Handler on_ready;
    uint64_t added_turn;
  };

  void control(int op, int fd, uint32_t events);
  int next_timeout_ms() const;
  void dispatch(const epoll_event& ev, uint64_t turn);
  void fire_timers();
  void run_tasks();
  void wake();

  std::string name_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<std::thread::id> loop_thread_{};
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> turn_{0};
  std::mutex watches_mu_;
  std::unordered_map<int, std::shared_ptr<Watch>> watches_;  // guarded by watches_mu_
  uint64_t next_timer_ = 1;
  std::map<TimerId, Task> timers_;
  std::mutex tasks_mu_;
  std::vector<Task> tasks_;             // guarded by tasks_mu_
  std::atomic<bool> has_tasks_{false};  // !tasks_.empty(), read without the lock
};

}  // namespace pscore
