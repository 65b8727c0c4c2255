// HashStore: an in-process Store (a map, a mutex and a condition variable). Ranks running as
// threads of one process rendezvous through it; the C++ tests use it everywhere.
#pragma once

#include <condition_variable>
#include <mutex>

#include "store/key_value_table.h"
#include "store/store.h"

namespace pscore {

struct HashStoreOptions {
  int64_t timeout_ms = 30000;
};

class HashStore : public Store {
 public:
  explicit HashStore(const HashStoreOptions& options = {});

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t amount) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, int64_t timeout_ms) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

 private:
  // Waits on cv_ until none of `keys` is missing; returns the missing ones at the deadline.
  std::vector<std::string> wait_locked(std::unique_lock<std::mutex>& lock,
                                       const std::vector<std::string>& keys, int64_t timeout_ms);

  std::mutex mutex_;
  std::condition_variable cv_;
  KeyValueTable table_;
};

}  // namespace pscore
