// OpProgress read by another thread while its lane writes it (the stall inspector's and the
// SIGUSR1 dump's view): every snapshot is made of values the lane wrote, in order.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "collectives/op_progress.h"

namespace pscore {
namespace {

constexpr uint64_t kOps = 20000;

OpContext context_of(uint64_t seq) {
  OpContext ctx;
  ctx.seq = seq;
  ctx.kind = seq % 2 ? OpKind::kBroadcast : OpKind::kAllreduce;
  ctx.dtype = DType::kFloat32;
  ctx.nbytes = seq * 8;
  return ctx;
}

TEST(OpProgress, SnapshotsFromAnotherThreadSeeWhatTheLaneWrote) {
  OpProgress progress;
  std::atomic<bool> done{false}, reading{false};
  std::thread lane([&] {
    while (!reading.load(std::memory_order_acquire)) {  // the reader is running: they overlap
      std::this_thread::yield();
    }
    for (uint64_t seq = 0; seq < kOps; ++seq) {
      progress.begin(context_of(seq));
      progress.waiting_on()->store(static_cast<int>(seq % 4), std::memory_order_relaxed);
      progress.end();
    }
    done.store(true, std::memory_order_release);
  });
  uint64_t last_entered = 0;
  uint64_t snapshots = 0;
  while (!done.load(std::memory_order_acquire)) {
    const OpSnapshot s = progress.snapshot();
    reading.store(true, std::memory_order_release);
    ASSERT_GE(s.entered, last_entered) << "the count of started collectives went back";
    last_entered = s.entered;
    EXPECT_TRUE(s.kind == OpKind::kAllreduce || s.kind == OpKind::kBroadcast);
    EXPECT_TRUE(s.dtype == DType::kUInt8 || s.dtype == DType::kFloat32);
    EXPECT_EQ(s.nbytes % 8, 0u);
    EXPECT_GE(s.waiting_on, -1);
    EXPECT_LE(s.waiting_on, 3);
    ++snapshots;
  }
  lane.join();
  const OpSnapshot last = progress.snapshot();
  EXPECT_EQ(last.entered, kOps);
  EXPECT_FALSE(last.running);
  EXPECT_EQ(last.nbytes, (kOps - 1) * 8);
  EXPECT_EQ(last.waiting_on, static_cast<int>((kOps - 1) % 4));
  EXPECT_GT(snapshots, 0u);
}

}  // namespace
}  // namespace pscore
