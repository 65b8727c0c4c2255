// A fixed set of threads running submitted tasks in FIFO order; the server's request handlers.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pscore::ps {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();  // finishes queued tasks, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Tasks must not throw; an escaping exception is caught and dropped.
  void submit(std::function<void()> task);
  // Runs the remaining tasks and joins the threads; idempotent.
  void shutdown();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

}  // namespace pscore::ps
