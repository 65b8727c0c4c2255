// Runs operations one at a time in submission order: synchronous ones on the caller's thread when
// nothing is queued, asynchronous ones on a background thread started on first use.
#pragma once

#include <condition_variable>
#include <deque>
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!queue_.empty() || busy_) return false;
      busy_ = true;
    }
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
  static void run(Task& t);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pscore
