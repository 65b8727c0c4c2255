#include "hogwild/owner_lock.h"

#include <sched.h>

#include <string>

#include "common/clock.h"
#include "common/error.h"

namespace pscore::hogwild {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

constexpr int kSpinsBeforeYield = 128;
constexpr int64_t kLivenessCheckUs = 2000;

}  // namespace

void lock_word(LockWord& word, int32_t me, const LockOwner& owner, int64_t timeout_ms,
               const char* what) {
  Deadline deadline(timeout_ms);
  int64_t next_check_us = now_us() + kLivenessCheckUs;
  for (int spins = 0;; ++spins) {
    if (try_lock_word(word, me)) return;
    if (spins < kSpinsBeforeYield) {
      cpu_relax();
      continue;
    }
    sched_yield();
    int64_t now = now_us();
    if (now < next_check_us) continue;
    next_check_us = now + kLivenessCheckUs;
    int32_t holder = word.owner.load(std::memory_order_relaxed);
    if (holder != 0 && holder != me && !owner.holder_alive(holder)) {
      // The holder died inside its critical section: take the lock over from it.
      if (word.owner.compare_exchange_strong(holder, me, std::memory_order_acquire)) return;
    }
    if (deadline.expired()) {
      throw TimeoutError(std::string(what) + ": lock held by " +
                         owner.describe_holder(word.owner.load()) + " for more than " +
                         std::to_string(timeout_ms) + " ms");
    }
  }
}

}  // namespace pscore::hogwild
