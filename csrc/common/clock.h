// Monotonic deadlines: every blocking call in pscore carries one.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace pscore {

using Clock = std::chrono::steady_clock;

// CLOCK_MONOTONIC_COARSE, on steady_clock's time line (libstdc++ reads CLOCK_MONOTONIC): a few
// ns against ~25 for Clock::now(), but behind it by a scheduler tick or more (4-8 ms measured
// here), so never for deadlines. For stamps taken on every collective call that only report
// how long something has run (OpProgress).
inline Clock::time_point coarse_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

class Deadline {
 public:
  // timeout_ms < 0 means "never" (and reads no clock).
  explicit Deadline(int64_t timeout_ms)
      : infinite_(timeout_ms < 0),
        at_(infinite_ ? Clock::time_point::max()
                      : Clock::now() + std::chrono::milliseconds(timeout_ms)) {}

  static Deadline never() { return Deadline(-1); }

  bool infinite() const { return infinite_; }
  bool expired() const { return !infinite_ && Clock::now() >= at_; }

  // Milliseconds left, clamped at 0; -1 when infinite (poll/epoll convention).
  int remaining_ms() const {
    if (infinite_) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left <= 0) return 0;
    return left > INT32_MAX ? INT32_MAX : static_cast<int>(left);
  }

  // remaining_ms(), but at most cap_ms (also when infinite): how long one slice of a wait that
  // wakes up now and then may sleep.
  int remaining_ms_at_most(int cap_ms) const {
    return infinite_ ? cap_ms : std::min(cap_ms, remaining_ms());
  }

  Clock::time_point time_point() const { return at_; }

 private:
  bool infinite_;
  Clock::time_point at_;
};

// An operation's deadline that starts counting at its first use rather than at the operation's
// start: an operation that never waits reads no clock for it. Not thread-safe; one per operation.
class LazyDeadline {
 public:
  explicit LazyDeadline(int64_t timeout_ms) : timeout_ms_(timeout_ms) {}
  // The deadline, armed now if this is the first use.
  const Deadline& get() {
    if (!armed_) {
      deadline_ = Deadline(timeout_ms_);
      armed_ = true;
    }
    return deadline_;
  }

 private:
  int64_t timeout_ms_;
  bool armed_ = false;
  Deadline deadline_ = Deadline::never();
};

inline int64_t to_us(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

inline int64_t now_us() { return to_us(Clock::now()); }

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// now_us() from the coarse clock (coarse_now()).
inline int64_t coarse_now_us() { return to_us(coarse_now()); }

}  // namespace pscore
