// A spin lock that lives in shared memory: the word holds the owner's pid, so a lock left held
// by a process that died (SIGKILL, os._exit) is taken over instead of blocking everyone forever.
#pragma once

#include <atomic>
#include <cstdint>

namespace pscore::hogwild {

// One lock word, padded to a cache line so neighbouring stripes do not share one.
struct alignas(64) LockWord {
  std::atomic<int32_t> owner{0};  // 0 when free, else the holder's pid
};
static_assert(std::atomic<int32_t>::is_always_lock_free, "shared-memory locks need lock-free ints");

// Acquires `word`: spins, then yields; every few ms checks whether the holder's pid is still
// alive and takes a dead holder's lock over. Throws TimeoutError naming `what` after timeout_ms
// (< 0: wait forever). Threads of one process share its pid, so the lock is not re-entrant.
void lock_word(LockWord& word, int64_t timeout_ms, const char* what);

// Tries once; true when acquired.
inline bool try_lock_word(LockWord& word, int32_t pid) {
  int32_t expected = 0;
  return word.owner.load(std::memory_order_relaxed) == 0 &&
         word.owner.compare_exchange_strong(expected, pid, std::memory_order_acquire,
                                            std::memory_order_relaxed);
}

inline void unlock_word(LockWord& word) { word.owner.store(0, std::memory_order_release); }

// The calling process's pid, cached (refreshed after fork).
int32_t self_pid();

// True unless kill(pid, 0) says the process does not exist.
bool pid_alive(int32_t pid);

// RAII holder for lock_word / unlock_word.
class LockGuard {
 public:
  LockGuard(LockWord& word, int64_t timeout_ms, const char* what) : word_(word) {
    if (!try_lock_word(word_, self_pid())) lock_word(word_, timeout_ms, what);
  }
  ~LockGuard() { unlock_word(word_); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  LockWord& word_;
};

}  // namespace pscore::hogwild
