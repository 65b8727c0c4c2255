// Work: the one protocol of an operation that may still be running, implemented by the
// collectives' tasks (collectives/task_work.h) and the parameter-server client's requests
// (ps/client/client_work.h), and bound to Python as pscore.work.Work's handle.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace pscore {

class Work {
 public:
  Work() = default;
  explicit Work(std::string what) : what_(std::move(what)) {}
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the operation is done or timeout_ms passes (< 0: no limit). Returns false when
  // it is still running at the limit (it keeps running; wait again); rethrows its failure.
  // Thread-safe.
  virtual bool wait(int64_t timeout_ms = -1) = 0;
  // True once it has finished, successfully or not.
  virtual bool is_completed() = 0;
  // Its failure once finished; nullptr while it runs and when it succeeded.
  virtual std::exception_ptr exception() = 0;

  // What the operation is, for messages ("rank 0: allreduce #41", "push 'w'").
  virtual std::string what() const { return what_; }
  bool failed() { return exception() != nullptr; }
  // The failure's message, or "" when there is none (yet).
  std::string exception_message();

 private:
  std::string what_;
};

}  // namespace pscore
