// A spin lock that lives in shared memory. The word holds its holder's tag (a handle's registry
// tag, see segment.h), so a lock left held by a process that died is taken over instead of
// blocking everyone forever; the LockOwner says whether a holder's handle still lives.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace pscore::hogwild {

// One lock word, padded to a cache line so neighbouring stripes do not share one.
struct alignas(64) LockWord {
  std::atomic<int32_t> owner{0};  // 0 when free, else the holder's tag
};
static_assert(std::atomic<int32_t>::is_always_lock_free, "shared-memory locks need lock-free ints");

// Who takes a lock: a nonzero tag, and a way to tell whether another tag's holder still lives.
class LockOwner {
 public:
  virtual ~LockOwner() = default;
  // Not const: a handle inherited across fork() registers as the child before it answers.
  virtual int32_t lock_tag() = 0;
  virtual bool holder_alive(int32_t tag) const = 0;
  // Who holds `tag`, for error messages ("pid 812, handle slot 3").
  virtual std::string describe_holder(int32_t tag) const = 0;
};

// Acquires `word` for `tag` (owner.lock_tag(), looked up once per batch by the caller): spins,
// then yields; every few ms asks `owner` whether the holder still lives and takes a dead
// holder's lock over. Throws TimeoutError naming `what` after timeout_ms (< 0: wait forever).
// Threads using one handle share its tag, so the lock is not re-entrant.
void lock_word(LockWord& word, int32_t tag, const LockOwner& owner, int64_t timeout_ms,
               const char* what);

// Tries once; true when acquired.
inline bool try_lock_word(LockWord& word, int32_t tag) {
  int32_t expected = 0;
  return word.owner.load(std::memory_order_relaxed) == 0 &&
         word.owner.compare_exchange_strong(expected, tag, std::memory_order_acquire,
                                            std::memory_order_relaxed);
}

inline void unlock_word(LockWord& word) { word.owner.store(0, std::memory_order_release); }

// RAII holder for lock_word / unlock_word.
class LockGuard {
 public:
  LockGuard(LockWord& word, int32_t tag, const LockOwner& owner, int64_t timeout_ms,
            const char* what)
      : word_(word) {
    if (!try_lock_word(word_, tag)) lock_word(word_, tag, owner, timeout_ms, what);
  }
  ~LockGuard() { unlock_word(word_); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  LockWord& word_;
};

}  // namespace pscore::hogwild
