// Work: the handle of an operation that may still be running; wait() rethrows its failure.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

namespace pscore {

class Work {
 public:
  explicit Work(std::string what) : what_(std::move(what)) {}
  // Blocks until done or timeout_ms passes (< 0: no limit); throws the operation's error, or
  // TimeoutError when it is still running at the limit.
  void wait(int64_t timeout_ms = -1);
  bool is_completed();
  // The failure message, or "" when it succeeded or is still running.
  std::string exception_message();
  bool failed();
  // The peer of a point-to-point operation (for a receive from any source, the sender, known
  // once it completes); -1 for collectives.
  int source() const { return source_.load(std::memory_order_acquire); }
  void set_source(int rank) { source_.store(rank, std::memory_order_release); }

  void finish(std::exception_ptr error = nullptr);

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::atomic<int> source_{-1};
};

}  // namespace pscore
