// The key-value Store interface every rendezvous store implements (torch.distributed.Store
// semantics): values are byte strings, get/wait block until keys exist or the timeout passes.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"

namespace pscore {

// Values are arbitrary bytes carried in std::string. add() keeps integers as decimal text, so
// get() after add() returns e.g. "5". Thread-safety: every implementation is safe to call from
// many threads at once; blocking calls only block their caller.
class Store {
 public:
  explicit Store(int64_t timeout_ms) : timeout_ms_(timeout_ms) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists, up to timeout_ms(); throws TimeoutError naming the key.
  virtual std::string get(const std::string& key) = 0;
  // Adds `amount` to the integer stored at key (missing counts as 0) and returns the new value.
  // Throws std::invalid_argument when the stored value is not an integer.
  virtual int64_t add(const std::string& key, int64_t amount) = 0;
  // Sets key to `desired` when it holds `expected` (or is missing and `expected` is empty).
  // Returns the value now stored; a missing key with non-empty `expected` returns `expected`.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // Blocks until every key exists, at most timeout_ms (< 0: forever); throws TimeoutError
  // naming the keys still missing.
  virtual void wait(const std::vector<std::string>& keys, int64_t timeout_ms) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_ms()); }
  // True when every key exists right now.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Removes key; true when it existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  // Default timeout of get() and wait(keys), in ms (< 0: forever).
  virtual int64_t timeout_ms() const { return timeout_ms_.load(); }
  virtual void set_timeout_ms(int64_t timeout_ms) { timeout_ms_.store(timeout_ms); }

 private:
  std::atomic<int64_t> timeout_ms_;
};

// Timeouts beyond this (about 30 years) mean "forever", like negative ones; longer ones would
// overflow the clock.
constexpr int64_t kMaxFiniteTimeoutMs = int64_t{1} << 50;
inline Deadline store_deadline(int64_t timeout_ms) {
  return (timeout_ms < 0 || timeout_ms > kMaxFiniteTimeoutMs) ? Deadline::never()
                                                              : Deadline(timeout_ms);
}

// Keys starting with this byte are the stores' own bookkeeping; num_keys() does not count them.
constexpr char kInternalKeyPrefix = '\0';
inline bool is_internal_key(const std::string& key) {
  return !key.empty() && key[0] == kInternalKeyPrefix;
}

}  // namespace pscore
