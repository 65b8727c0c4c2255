// Runs operations one at a time in submission order: synchronous ones on the caller's thread when
// nothing is queued, asynchronous ones on a background thread started on first use.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "collectives/task_work.h"

namespace pscore {

class Executor {
 public:
  Executor() = default;
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs fn after everything submitted before it. Blocks until done unless async; failures are
  // stored in the returned Work (and rethrown here when not async).
  std::shared_ptr<TaskWork> submit(const std::string& what, std::function<void()> fn, bool async);
  // The same, for a TaskWork the caller made (so that fn can refer to it).
  std::shared_ptr<TaskWork> submit(std::shared_ptr<TaskWork> work, std::function<void()> fn,
                                   bool async);
  // Runs f on this thread when nothing is queued or running and returns true (a synchronous
  // operation's fast path: no Work, no allocation; f's exceptions propagate); false when f
  // must be queued instead.
  template <class F>
  bool run_here_if_idle(F&& f) {
    uint32_t idle = 0;
    if (!state_.compare_exchange_strong(idle, kRunning, std::memory_order_acquire)) return false;
    struct Release {
      Executor* executor;
      ~Release() { executor->release(); }
    } release{this};
    f();
    return true;
  }
  // Nothing queued or running.
  bool idle();

 private:
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<TaskWork> work;
  };
  void loop();
  void release();  // the end of a task run on the caller's thread
  // With mu_ held: takes the running bit for the queue's first task; false while a task runs.
  bool claim_queued();
  static std::exception_ptr run(const std::function<void()>& fn);  // fn's failure, if any

  // The running bit, plus kQueued per task in queue_: an idle executor is 0, so the caller's
  // thread claims it with one compare-and-swap, no lock (a small collective's fast path).
  static constexpr uint32_t kRunning = 1;
  static constexpr uint32_t kQueued = 2;
  std::atomic<uint32_t> state_{0};
  std::mutex mu_;  // queue_, stop_, thread_; the loop sleeps on cv_ under it
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pscore
