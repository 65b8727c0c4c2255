// The ring gauge turns slow on a run of slow writes, not on one; while slow it lets one payload in
// 16 take the ring, to measure; it turns fast again on fast writes.
#include <gtest/gtest.h>

#include "transport/shm/ring_gauge.h"

namespace pscore {
namespace {

constexpr size_t kWrite = 512 << 10;
constexpr int64_t kFastNs = 12000;      // 512 KB in 12 us: about 44 GB/s
constexpr int64_t kSlowNs = 150000;     // in 150 us: about 3.5 GB/s
constexpr int64_t kModerateNs = 56000;  // in 56 us (110 ns/KB): about 9 GB/s

TEST(RingGauge, StartsFastAndStaysFastOnFastWrites) {
  RingGauge g;
  for (int i = 0; i < 100; ++i) g.record(kWrite, kFastNs);
  EXPECT_FALSE(g.slow());
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(g.take_ring());
}

// The pace of this VM's moderately slow spells, where the ring still beat the single copy.
TEST(RingGauge, ModeratelySlowWritesKeepTheRing) {
  RingGauge g;
  for (int i = 0; i < 100; ++i) g.record(kWrite, kModerateNs);
  EXPECT_FALSE(g.slow());
}

TEST(RingGauge, OnePreemptedWriteDoesNotTurnIt) {
  RingGauge g;
  for (int i = 0; i < 20; ++i) g.record(kWrite, kFastNs);
  g.record(kWrite, 5'000'000);  // 5 ms off the core mid-copy
  EXPECT_FALSE(g.slow());
}

TEST(RingGauge, SlowWritesTurnItButForOneProbeIn16) {
  RingGauge g;
  for (int i = 0; i < 20; ++i) g.record(kWrite, kSlowNs);
  ASSERT_TRUE(g.slow());
  int rings = 0;
  for (int i = 0; i < 64; ++i) rings += g.take_ring();
  EXPECT_EQ(rings, 4);
}

TEST(RingGauge, FastProbesTurnItBack) {
  RingGauge g;
  for (int i = 0; i < 20; ++i) g.record(kWrite, kSlowNs);
  ASSERT_TRUE(g.slow());
  int probes = 0;
  while (g.slow() && probes < 100) {
    g.record(kWrite, kFastNs);
    ++probes;
  }
  EXPECT_FALSE(g.slow());
  EXPECT_GT(probes, 3);  // hysteresis: not on the first fast write
}

}  // namespace
}  // namespace pscore
