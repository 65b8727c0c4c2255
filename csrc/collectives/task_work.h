// TaskWork: the Work of one collective or point-to-point task, finished once by the executor
// (or by the task that receives from any source).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>

#include "collectives/message.h"
#include "common/work.h"

namespace pscore {

class TaskWork : public Work {
 public:
  explicit TaskWork(std::string what) : Work(std::move(what)) {}
  // A collective's: "rank 0: allreduce #41", formatted only when a message asks for it.
  TaskWork(int rank, OpKind kind, uint64_t seq) : rank_(rank), kind_(kind), seq_(seq) {}
  std::string what() const override;
  bool wait(int64_t timeout_ms = -1) override;
  bool is_completed() override;
  std::exception_ptr exception() override;

  // The peer of a point-to-point operation (for a receive from any source, the sender, known
  // once it completes); -1 for collectives.
  int source() const { return source_.load(std::memory_order_acquire); }
  void set_source(int rank) { source_.store(rank, std::memory_order_release); }

  // Marks it done, with its failure or nullptr; wakes every waiter.
  void finish(std::exception_ptr error = nullptr);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::atomic<int> source_{-1};
  int rank_ = -1;  // >= 0: a collective's Work, described by rank_, kind_ and seq_
  OpKind kind_ = OpKind::kAllreduce;
  uint64_t seq_ = 0;
};

}  // namespace pscore
