// Many threads and several processes updating one table at once. Updates are integer-valued so
// float arithmetic is exact: lock-free updates of disjoint rows and locked updates of colliding
// rows must both land exactly; lock-free collisions may lose updates but never corrupt a value.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "hogwild/shared_table.h"

namespace hw = pscore::hogwild;
using pscore::DType;

namespace {

constexpr int kThreads = 8;
constexpr int kSteps = 400;
constexpr uint64_t kDim = 16;

std::string unique_name(const char* tag) {
  static int n = 0;
  return std::string("gt-") + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
}

std::shared_ptr<hw::SharedTable> make(const std::string& name, uint64_t rows,
                                      hw::OptimizerState opt = hw::OptimizerState::kNone) {
  hw::TableSpec s;
  s.shape = {rows, kDim};
  s.optimizer = opt;
  s.lock_stripes = 7;  // few stripes: rows share locks, as they would in a big table
  return hw::SharedTable::create(name, s, {});
}

// Each step: every id in `ids` gets a gradient of -1 (so sgd with lr 1 adds +1 per occurrence).
void run_steps(hw::SharedTable& t, const std::vector<int64_t>& ids, bool locked,
               const hw::SgdOptions& opts = {1.0}) {
  std::vector<float> g(ids.size() * kDim, -1.f);
  hw::UpdateBatch b;
  b.ids = ids.data();
  b.num_ids = ids.size();
  b.grads = g.data();
  b.grads_numel = g.size();
  b.locked = locked;
  for (int s = 0; s < kSteps; ++s) t.sgd(b, opts);
}

const float* params(const hw::SharedTable& t) { return static_cast<const float*>(t.array(-1)); }

TEST(Concurrency, LockFreeThreadsOnDisjointRowsAreExact) {
  auto t = make(unique_name("disjoint"), kThreads * 4);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      std::vector<int64_t> ids{4 * i, 4 * i + 1, 4 * i + 3, 4 * i + 1};
      run_steps(*t, ids, false);
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < kThreads; ++i) {
    const float* w = params(*t);
    for (uint64_t j = 0; j < kDim; ++j) {
      ASSERT_EQ(w[(4 * i) * kDim + j], kSteps);
      ASSERT_EQ(w[(4 * i + 1) * kDim + j], 2 * kSteps);
      ASSERT_EQ(w[(4 * i + 2) * kDim + j], 0);
      ASSERT_EQ(w[(4 * i + 3) * kDim + j], kSteps);
    }
  }
  EXPECT_EQ(t->update_count(), uint64_t{kThreads} * kSteps);
}

TEST(Concurrency, LockedThreadsOnCollidingRowsAreExact) {
  auto t = make(unique_name("collide"), 5);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] { run_steps(*t, {0, 1, 2, 0}, true); });
  }
  for (auto& th : threads) th.join();
  const float* w = params(*t);
  for (uint64_t j = 0; j < kDim; ++j) {
    EXPECT_EQ(w[0 * kDim + j], 2 * kThreads * kSteps);
    EXPECT_EQ(w[1 * kDim + j], kThreads * kSteps);
    EXPECT_EQ(w[2 * kDim + j], kThreads * kSteps);
    EXPECT_EQ(w[3 * kDim + j], 0);
  }
}

// With momentum 0.5, dampening 0.5 and a constant gradient -1, a buffer that starts as the first
// gradient stays exactly -1 (0.5 * -1 + 0.5 * -1), so every update adds exactly lr; a row whose
// buffer started from zero would move by fractions. Shared buffers and row flags under threads.
TEST(Concurrency, LockedMomentumFromThreadsStartsEachRowsBufferAsItsFirstGradient) {
  auto t = make(unique_name("momentum"), 5, hw::OptimizerState::kMomentum);
  const hw::SgdOptions momentum{1.0, 0.5, 0.5};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] { run_steps(*t, {0, 1, 2, 0}, true, momentum); });
  }
  for (auto& th : threads) th.join();
  const float* w = params(*t);
  const float* buf = static_cast<const float*>(t->array(0));
  for (uint64_t j = 0; j < kDim; ++j) {
    EXPECT_EQ(w[0 * kDim + j], 2 * kThreads * kSteps);
    EXPECT_EQ(w[2 * kDim + j], kThreads * kSteps);
    EXPECT_EQ(w[3 * kDim + j], 0);
    EXPECT_EQ(buf[1 * kDim + j], -1.f);
    EXPECT_EQ(buf[3 * kDim + j], 0.f);
  }
  EXPECT_EQ(t->row_flags()[2], 1);
  EXPECT_EQ(t->row_flags()[4], 0);
}

TEST(Concurrency, LockedDenseAxpyFromThreadsIsExact) {
  auto t = make(unique_name("dense"), 300);  // several lock granules
  std::vector<float> x(300 * kDim, 1.f);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      for (int s = 0; s < 50; ++s) t->axpy(1.0, x.data(), x.size(), DType::kFloat32, true);
    });
  }
  for (auto& th : threads) th.join();
  const float* w = params(*t);
  for (uint64_t k = 0; k < x.size(); ++k) ASSERT_EQ(w[k], kThreads * 50) << k;
}

TEST(Concurrency, LockFreeCollisionsMayLoseUpdatesButNeverCorrupt) {
  auto t = make(unique_name("racy"), 2);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] { run_steps(*t, {0, 1}, false); });
  }
  for (auto& th : threads) th.join();
  const float* w = params(*t);
  for (uint64_t k = 0; k < 2 * kDim; ++k) {
    // Every value is a whole number of applied updates: at least one thread's, at most all.
    EXPECT_EQ(w[k], static_cast<float>(static_cast<int>(w[k])));
    EXPECT_GE(w[k], 1);
    EXPECT_LE(w[k], kThreads * kSteps);
  }
}

TEST(Concurrency, LockedAdagradFromThreadsKeepsTheAccumulatorExact) {
  auto t = make(unique_name("adagrad"), 3, hw::OptimizerState::kAdagrad);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      std::vector<int64_t> ids{0, 2};
      std::vector<float> g(2 * kDim, 2.f);
      hw::UpdateBatch b;
      b.ids = ids.data();
      b.num_ids = 2;
      b.grads = g.data();
      b.grads_numel = g.size();
      b.locked = true;
      for (int s = 0; s < kSteps; ++s) t->adagrad(b, {0.01, 1e-10});
    });
  }
  for (auto& th : threads) th.join();
  const float* acc = static_cast<const float*>(t->array(0));
  for (uint64_t j = 0; j < kDim; ++j) {
    EXPECT_EQ(acc[j], 4.f * kThreads * kSteps);
    EXPECT_EQ(acc[kDim + j], 0.f);
    EXPECT_EQ(acc[2 * kDim + j], 4.f * kThreads * kSteps);
  }
}

TEST(Concurrency, LockedProcessesOnCollidingRowsAreExact) {
  const std::string name = unique_name("procs");
  auto t = make(name, 4);
  constexpr int kProcs = 4;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 0;
      try {
        auto c = hw::SharedTable::attach(name, {});
        std::vector<std::thread> threads;
        for (int i = 0; i < 2; ++i) threads.emplace_back([&] { run_steps(*c, {3, 1, 3}, true); });
        for (auto& th : threads) th.join();
        c->close();
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const float* w = params(*t);
  for (uint64_t j = 0; j < kDim; ++j) {
    EXPECT_EQ(w[3 * kDim + j], 2 * kProcs * 2 * kSteps);
    EXPECT_EQ(w[1 * kDim + j], kProcs * 2 * kSteps);
    EXPECT_EQ(w[0 * kDim + j], 0);
  }
  EXPECT_EQ(t->live_attachments(), 1);
}

}  // namespace
