// Which push sequence numbers of one worker a table has applied: the highest, and a bitmap of
// the kBits numbers below it (a sliding anti-replay window). A push retried out of order - a
// thread's retry landing after another thread's newer push - is still recognised as new;
// only numbers more than kBits below the highest count as seen without a check.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>

namespace pscore::ps {

class SeqWindow {
 public:
  static constexpr uint64_t kBits = 4096;
  bool contains(uint64_t seq) const {
    if (seq > high_) return false;
    if (high_ - seq >= kBits) return true;
    return seen_[seq % kBits];
  }
  void insert(uint64_t seq) {
    if (seq > high_) {
      if (seq - high_ >= kBits) {
        seen_.reset();
      } else {
        for (uint64_t s = high_ + 1; s <= seq; ++s) seen_.reset(s % kBits);
      }
      high_ = seq;
    }
    if (high_ - seq < kBits) seen_.set(seq % kBits);
  }
  uint64_t high() const { return high_; }
  // The bitmap as hex (for checkpoints) and back; restore(high, "") marks everything up to
  // high as seen.
  std::string bits_hex() const;
  void restore(uint64_t high, const std::string& hex);

 private:
  uint64_t high_ = 0;
  std::bitset<kBits> seen_;
};

}  // namespace pscore::ps
