#include "store/key_value_table.h"

#include "store/store.h"
#include "store/store_errors.h"

namespace pscore {

void KeyValueTable::note_inserted(const std::string& key) {
  if (is_internal_key(key)) ++internal_keys_;
}

void KeyValueTable::set(const std::string& key, const std::string& value) {
  auto [it, inserted] = map_.insert_or_assign(key, value);
  (void)it;
  if (inserted) note_inserted(key);
}

const std::string* KeyValueTable::find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

int64_t KeyValueTable::add(const std::string& key, int64_t amount) {
  auto it = map_.find(key);
  int64_t value = amount;
  if (it != map_.end()) {
    value = parse_stored_integer(key, it->second) + amount;
    it->second = std::to_string(value);
  } else {
    map_.emplace(key, std::to_string(value));
    note_inserted(key);
  }
  return value;
}

std::string KeyValueTable::compare_set(const std::string& key, const std::string& expected,
                                       const std::string& desired) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (!expected.empty()) return expected;
    map_.emplace(key, desired);
    note_inserted(key);
    return desired;
  }
  if (it->second == expected) it->second = desired;
  return it->second;
}

bool KeyValueTable::erase(const std::string& key) {
  if (map_.erase(key) == 0) return false;
  if (is_internal_key(key)) --internal_keys_;
  return true;
}

std::vector<std::string> KeyValueTable::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!map_.count(k)) out.push_back(k);
  return out;
}

}  // namespace pscore
