#include "collectives/work.h"

#include <chrono>

#include "common/error.h"

namespace pscore {

void Work::wait(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_ms < 0) {
    cv_.wait(lock, [this] { return done_; });
  } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return done_; })) {
    throw TimeoutError(what_ + ": still running after waiting " + std::to_string(timeout_ms) +
                       " ms");
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool Work::failed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && error_;
}

std::string Work::exception_message() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_) return "";
  try {
    std::rethrow_exception(error_);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = error;
  }
  cv_.notify_all();
}

}  // namespace pscore
