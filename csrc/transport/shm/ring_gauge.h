// RingGauge: whether copies into a peer's ring run at cache speed. Where they do, a payload that
// fits the ring is faster through it (its two copies overlap on two cores, and the sender need
// not wait for the reader). Where the peer's cache lines come across slowly (ranks on different
// dies or sockets, or vCPUs a hypervisor placed so: a 512 KB write took 150 us instead of 12 on
// this project's VM, for seconds at a time), one copy out of the sender's memory beats two, so
// the sender sends addresses instead, but for one probe in kProbeEvery that measures again.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pscore {

class RingGauge {
 public:
  // Writes at least this large are measured: as small as the payloads the gauge steers
  // (SingleCopyBytes::kGaugedBytes), so that their probes measure too.
  static constexpr size_t kTimedBytes = 32 << 10;

  // Records one write of nbytes that took ns: slow once the average passes kSlowNsPerKB, fast
  // again below half of it. A sample counts at most kMaxSampleNsPerKB, so one preempted write
  // does not turn the gauge.
  void record(size_t nbytes, int64_t ns) {
    const int64_t sample = ns * 1024 / static_cast<int64_t>(nbytes);
    const int64_t d = sample < kMaxSampleNsPerKB ? sample : kMaxSampleNsPerKB;
    average_ = average_ - average_ / kWeight + d / kWeight;
    if (average_ > kSlowNsPerKB)
      slow_ = true;
    else if (average_ < kSlowNsPerKB / 2)
      slow_ = false;
  }
  // Whether a payload that fits the ring should take it: yes while writes are fast; while they
  // are slow one in kProbeEvery.
  bool take_ring() { return !slow_ || probes_++ % kProbeEvery == 0; }
  bool slow() const { return slow_; }

 private:
  // 5 GB/s: a copy out of cache runs at 20-45. In this VM's moderately slow spells writes ran at
  // 60-110 ns/KB, and a 2-rank broadcast of 32 KB-1 MB was still faster through the ring (64 KB:
  // 5 us, by address 8); in its slow spells, 400 and more, by address won at every size.
  static constexpr int64_t kSlowNsPerKB = 200;
  static constexpr int64_t kMaxSampleNsPerKB = 4 * kSlowNsPerKB;
  static constexpr int64_t kWeight = 8;  // the average is over about this many writes
  static constexpr uint32_t kProbeEvery = 16;
  int64_t average_ = 0;
  bool slow_ = false;
  uint32_t probes_ = 0;
};

}  // namespace pscore
