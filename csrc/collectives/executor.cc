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

void Executor::run(Task& t) {
  try {
    t.fn();
    t.work->finish();
  } catch (...) {
    t.work->finish(std::current_exception());
  }
}

void Executor::release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
  cv_.notify_all();
}

bool Executor::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && !busy_;
}

std::shared_ptr<TaskWork> Executor::submit(const std::string& what, std::function<void()> fn,
                                           bool async) {
  return submit(std::make_shared<TaskWork>(what), std::move(fn), async);
}

std::shared_ptr<TaskWork> Executor::submit(std::shared_ptr<TaskWork> work, std::function<void()> fn,
                                           bool async) {
  Task task{std::move(fn), work};
  if (!async && run_here_if_idle([&] { run(task); })) {  // inline, in order
    work->wait();
    return work;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_all();
  if (!async) work->wait();
  return work;
}

void Executor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || (!queue_.empty() && !busy_); });
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    Task task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    run(task);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace pscore
