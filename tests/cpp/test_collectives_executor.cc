// The executor's order and exclusion: tasks run one at a time in submission order, whether they
// run on the caller's thread (the lock-free idle path) or on the background thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "collectives/executor.h"

namespace pscore {
namespace {

// Counts the tasks running at once; a second one inside fails the test.
struct Exclusive {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  void run() {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    std::this_thread::yield();
    inside.fetch_sub(1);
  }
};

TEST(Executor, AnIdleExecutorRunsASynchronousTaskOnTheCallersThread) {
  Executor ex;
  std::thread::id ran_on;
  EXPECT_TRUE(ex.run_here_if_idle([&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(ex.idle());
}

TEST(Executor, ATaskQueuedFirstRunsFirst) {
  Executor ex;
  std::atomic<bool> gate{false};
  std::vector<int> order;
  auto first = ex.submit(
      "first",
      [&] {
        while (!gate.load()) std::this_thread::yield();
        order.push_back(1);
      },
      true);
  EXPECT_FALSE(ex.idle());
  EXPECT_FALSE(ex.run_here_if_idle([&] { order.push_back(99); }));  // busy: must queue
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.store(true);
  });
  auto second = ex.submit("second", [&] { order.push_back(2); }, false);  // waits for first
  opener.join();
  EXPECT_TRUE(first->wait(-1));
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_TRUE(ex.idle());
}

// Several threads mix tasks run inline with queued ones, as callers of one process group's
// collectives and its background work do; per thread, its tasks keep their order.
TEST(Executor, InlineAndQueuedTasksNeverOverlapAndKeepEachThreadsOrder) {
  constexpr int kThreads = 4;
  constexpr int kTasks = 400;
  Executor ex;
  Exclusive guard;
  std::vector<std::vector<int>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::shared_ptr<TaskWork>> works;
      for (int i = 0; i < kTasks; ++i) {
        auto task = [&, t, i] {
          guard.run();
          seen[t].push_back(i);
        };
        if (i % 3 == 0)
          works.push_back(ex.submit("async", task, true));
        else if (!ex.run_here_if_idle(task))
          works.push_back(ex.submit("sync", task, false));
      }
      for (auto& w : works) w->wait(-1);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(guard.overlaps.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kTasks));
    for (int i = 0; i < kTasks; ++i) EXPECT_EQ(seen[t][i], i) << "thread " << t;
  }
  EXPECT_TRUE(ex.idle());
}

TEST(Executor, DestructionRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    Executor ex;
    for (int i = 0; i < 50; ++i) ex.submit("async", [&] { ran.fetch_add(1); }, true);
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace pscore
