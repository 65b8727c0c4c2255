#include "collectives/executor.h"

namespace pscore {

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::exception_ptr Executor::run(const std::function<void()>& fn) {
  try {
    fn();
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

// Taking mu_ after clearing the bit pairs with the loop's check under mu_: either the loop sees
// the bit cleared, or it is already asleep when notified.
void Executor::release() {
  if (state_.fetch_sub(kRunning, std::memory_order_acq_rel) == kRunning) return;  // none queued
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

bool Executor::claim_queued() {
  uint32_t s = state_.load(std::memory_order_relaxed);
  while ((s & kRunning) == 0)
    if (state_.compare_exchange_weak(s, s - kQueued + kRunning, std::memory_order_acquire))
      return true;
  return false;
}

bool Executor::idle() { return state_.load(std::memory_order_acquire) == 0; }

std::shared_ptr<TaskWork> Executor::submit(const std::string& what, std::function<void()> fn,
                                           bool async) {
  return submit(std::make_shared<TaskWork>(what), std::move(fn), async);
}

std::shared_ptr<TaskWork> Executor::submit(std::shared_ptr<TaskWork> work, std::function<void()> fn,
                                           bool async) {
  Task task{std::move(fn), work};
  std::exception_ptr error;
  if (!async && run_here_if_idle([&] { error = run(task.fn); })) {  // inline, in order
    work->finish(error);
    work->wait();
    return work;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    state_.fetch_add(kQueued, std::memory_order_relaxed);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_all();
  if (!async) work->wait();
  return work;
}

void Executor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Drains the queue before stopping; a task queued behind one run inline waits for release().
    cv_.wait(lock,
             [this] { return (!queue_.empty() && claim_queued()) || (stop_ && queue_.empty()); });
    if (queue_.empty()) return;
    Task task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr error = run(task.fn);
    // Released before the Work finishes: its waiter's next call finds the executor idle.
    state_.fetch_sub(kRunning, std::memory_order_release);
    task.work->finish(error);
    lock.lock();
  }
}

}  // namespace pscore
