#include "store/hash_store.h"

#include "common/clock.h"
#include "common/error.h"
#include "store/store_errors.h"

namespace pscore {

HashStore::HashStore(const HashStoreOptions& options) : Store(options.timeout_ms) {}

void HashStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    table_.set(key, value);
  }
  cv_.notify_all();
}

std::vector<std::string> HashStore::wait_locked(std::unique_lock<std::mutex>& lock,
                                                const std::vector<std::string>& keys,
                                                int64_t timeout_ms) {
  Deadline deadline = store_deadline(timeout_ms);
  auto missing = table_.missing(keys);
  while (!missing.empty()) {
    if (deadline.infinite()) {
      cv_.wait(lock);
    } else if (cv_.wait_until(lock, deadline.time_point()) == std::cv_status::timeout) {
      return table_.missing(keys);
    }
    missing = table_.missing(keys);
  }
  return missing;
}

std::string HashStore::get(const std::string& key) {
  std::unique_lock<std::mutex> lock(mutex_);
  int64_t timeout = timeout_ms();
  if (!wait_locked(lock, {key}, timeout).empty())
    throw TimeoutError(get_timeout_message("HashStore", key, timeout));
  return *table_.find(key);
}

int64_t HashStore::add(const std::string& key, int64_t amount) {
  int64_t value;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    value = table_.add(key, amount);
  }
  cv_.notify_all();
  return value;
}

std::string HashStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  std::string value;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    value = table_.compare_set(key, expected, desired);
  }
  cv_.notify_all();
  return value;
}

void HashStore::wait(const std::vector<std::string>& keys, int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto missing = wait_locked(lock, keys, timeout_ms);
  if (!missing.empty()) throw TimeoutError(wait_timeout_message("HashStore", timeout_ms, missing));
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  return table_.missing(keys).empty();
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return table_.erase(key);
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(mutex_);
  return table_.num_keys();
}

}  // namespace pscore
