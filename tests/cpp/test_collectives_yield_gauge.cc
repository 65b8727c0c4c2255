// YieldGauge: the yield window closes while yields cost time slices, survives a stray slow
// yield, and opens again once probes find yields cheap.
#include <gtest/gtest.h>

#include "collectives/yield_gauge.h"

namespace pscore {
namespace {

constexpr int64_t kCheapUs = 5;
constexpr int64_t kSliceUs = 3000;

int yields_in(YieldGauge& g, int ops) {
  int n = 0;
  for (int i = 0; i < ops; ++i) n += g.should_yield();
  return n;
}

TEST(YieldGauge, StartsOpenAndStaysOpenWhileYieldsAreCheap) {
  YieldGauge g;
  EXPECT_FALSE(g.slow());
  for (int i = 0; i < 1000; ++i) g.record(kCheapUs);
  EXPECT_FALSE(g.slow());
  EXPECT_EQ(yields_in(g, 100), 100);
}

TEST(YieldGauge, AStraySlowYieldDoesNotCloseIt) {
  YieldGauge g;
  for (int i = 0; i < 200; ++i) g.record(i % 10 == 0 ? kSliceUs : kCheapUs);  // one in ten
  EXPECT_FALSE(g.slow());
  g.record(kSliceUs);  // and one more at once
  EXPECT_FALSE(g.slow());
  EXPECT_EQ(yields_in(g, 20), 20);
}

TEST(YieldGauge, YieldsThatCostASliceCloseItButForProbes) {
  YieldGauge g;
  int recorded = 0;
  while (!g.slow()) {
    g.record(kSliceUs);
    ASSERT_LT(++recorded, 20) << "a run of slow yields must close the window";
  }
  EXPECT_GE(recorded, 3);            // more than a stray one or two
  EXPECT_EQ(yields_in(g, 160), 10);  // one operation in 16 probes
}

TEST(YieldGauge, CheapProbesOpenItAgain) {
  YieldGauge g;
  for (int i = 0; i < 50; ++i) g.record(kSliceUs);
  ASSERT_TRUE(g.slow());
  int probes = 0;
  for (int op = 0; op < 1000 && g.slow(); ++op)
    if (g.should_yield()) {
      g.record(kCheapUs);
      ++probes;
    }
  EXPECT_FALSE(g.slow());
  EXPECT_GE(probes, 10);  // hysteresis: it stays closed through a few cheap probes
  EXPECT_LE(probes, 25);
  EXPECT_EQ(yields_in(g, 50), 50);
}

}  // namespace
}  // namespace pscore
