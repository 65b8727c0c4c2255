// The map behind HashStore and the TCP store server: Store semantics for set/add/compare_set,
// with no locking of its own (callers hold theirs) and no waiting.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace pscore {

class KeyValueTable {
 public:
  void set(const std::string& key, const std::string& value);
  // Returns nullptr when the key is missing. The pointer is valid until the next mutation.
  const std::string* find(const std::string& key) const;
  int64_t add(const std::string& key, int64_t amount);
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  bool erase(const std::string& key);
  bool contains(const std::string& key) const { return map_.count(key) != 0; }
  // Keys of `keys` that are not present, in order.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  // Count of user keys (internal bookkeeping keys excluded).
  int64_t num_keys() const { return static_cast<int64_t>(map_.size()) - internal_keys_; }

 private:
  void note_inserted(const std::string& key);

  std::unordered_map<std::string, std::string> map_;
  int64_t internal_keys_ = 0;
};

}  // namespace pscore
