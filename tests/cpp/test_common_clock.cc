// The coarse clock (common/clock.h): on steady_clock's time line and never ahead of it.
#include <gtest/gtest.h>

#include <chrono>

#include "common/clock.h"

namespace pscore {
namespace {

using std::chrono::milliseconds;

// Far above its lag (a tick or two: 4-8 ms measured) and a loaded machine's delays, far below
// the offset of CLOCK_REALTIME (the epoch) from CLOCK_MONOTONIC.
constexpr auto kSameLine = milliseconds(200);

TEST(CoarseClock, ReadsSteadyClocksTimeLineAndNeverRunsAhead) {
  for (int i = 0; i < 1000; ++i) {
    const auto before = Clock::now();
    const auto coarse = coarse_now();
    const auto after = Clock::now();
    ASSERT_LE(coarse, after);
    ASSERT_GT(coarse, before - kSameLine);
  }
  const int64_t before = now_us();
  const int64_t coarse = coarse_now_us();
  EXPECT_LE(coarse, now_us());
  EXPECT_GT(coarse, before - 200000);
}

}  // namespace
}  // namespace pscore
