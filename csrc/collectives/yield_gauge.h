// YieldGauge: whether a rank that waits beside more ranks than cores should poll with sched_yield
// (cheap: the core goes to the peer it waits for) or sleep at once (yields cost whole time
// slices, as on EEVDF kernels beside a task that never blocks). Judged from a moving average of
// recent yields, so a stray slow one on a busy machine does not close the window for good.
#pragma once

#include <atomic>
#include <cstdint>

namespace pscore {

class YieldGauge {
 public:
  // Whether the next operation should yield while it waits: yes while the window is open;
  // while it is closed only one operation in kProbeEvery, which measures whether yields still
  // cost a slice. Any thread; relaxed (a lost update only delays the verdict by a yield).
  bool should_yield() {
    if (!closed_.load(std::memory_order_relaxed)) return true;
    return probes_.fetch_add(1, std::memory_order_relaxed) % kProbeEvery == 0;
  }
  // Records what one yield cost: the window closes once the average passes kSlowYieldUs and
  // opens again below a quarter of it.
  void record(int64_t yield_us) {
    const int64_t d = yield_us < kMaxSampleUs ? yield_us : kMaxSampleUs;
    const int64_t a = average_us_.load(std::memory_order_relaxed);
    const int64_t next = a - a / kWeight + d / kWeight;
    average_us_.store(next, std::memory_order_relaxed);
    if (next > kSlowYieldUs)
      closed_.store(true, std::memory_order_relaxed);
    else if (next < kSlowYieldUs / 4)
      closed_.store(false, std::memory_order_relaxed);
  }
  // Yields cost time slices lately: operations sleep at once, but for the probes.
  bool slow() const { return closed_.load(std::memory_order_relaxed); }

 private:
  // Yields that keep their rank off the core this long on average hand the core away for time
  // slices, not to a peer that runs briefly: 2 us to 200 us on kernels before 6.6; on 6.18
  // beside a task that never blocks, a third of the yields took 1-5 ms (1.4 ms on average).
  static constexpr int64_t kSlowYieldUs = 1000;
  static constexpr int64_t kWeight = 8;  // the average is over about this many yields
  static constexpr int64_t kMaxSampleUs = 100000;
  static constexpr uint32_t kProbeEvery = 16;
  std::atomic<int64_t> average_us_{0};
  std::atomic<bool> closed_{false};
  std::atomic<uint32_t> probes_{0};
};

}  // namespace pscore
