#include "collectives/task_work.h"

#include <chrono>

namespace pscore {

std::string TaskWork::what() const {
  if (rank_ < 0) return Work::what();
  return "rank " + std::to_string(rank_) + ": " + op_kind_name(kind_) + " #" + std::to_string(seq_);
}

bool TaskWork::wait(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_ms < 0) {
    cv_.wait(lock, [this] { return done_; });
  } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return done_; })) {
    return false;
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

bool TaskWork::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

std::exception_ptr TaskWork::exception() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ ? error_ : nullptr;
}

void TaskWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = error;
  }
  cv_.notify_all();
}

}  // namespace pscore
