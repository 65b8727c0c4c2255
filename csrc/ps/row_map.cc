#include "ps/row_map.h"

#include "ps/initializer.h"

namespace pscore::ps {

size_t RowMap::slot_of(uint64_t key) const { return mix64(key) & mask_; }

int64_t RowMap::find(int64_t id) const {
  if (id == -1) return has_minus_one_ ? minus_one_row_ : -1;
  const uint64_t key = static_cast<uint64_t>(id) + 1;
  for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
    if (keys_[s] == key) return rows_[s];
    if (keys_[s] == 0) return -1;
  }
}

uint32_t RowMap::find_or_insert(int64_t id, uint32_t new_row, bool* inserted) {
  *inserted = false;
  if (id == -1) {
    if (!has_minus_one_) {
      has_minus_one_ = true;
      minus_one_row_ = new_row;
      ++size_;
      *inserted = true;
    }
    return minus_one_row_;
  }
  if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size() * 2);
  const uint64_t key = static_cast<uint64_t>(id) + 1;
  for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
    if (keys_[s] == key) return rows_[s];
    if (keys_[s] == 0) {
      keys_[s] = key;
      rows_[s] = new_row;
      ++size_;
      *inserted = true;
      return new_row;
    }
  }
}

void RowMap::rehash(size_t capacity) {
  std::vector<uint64_t> old_keys;
  std::vector<uint32_t> old_rows;
  old_keys.swap(keys_);
  old_rows.swap(rows_);
  keys_.assign(capacity, 0);
  rows_.assign(capacity, 0);
  mask_ = capacity - 1;
  for (size_t i = 0; i < old_keys.size(); ++i) {
    if (old_keys[i] == 0) continue;
    size_t s = slot_of(old_keys[i]);
    while (keys_[s] != 0) s = (s + 1) & mask_;
    keys_[s] = old_keys[i];
    rows_[s] = old_rows[i];
  }
}

void RowMap::reserve(size_t n) {
  size_t cap = keys_.size();
  while (n * 2 > cap) cap *= 2;
  if (cap != keys_.size()) rehash(cap);
}

void RowMap::clear() {
  keys_.assign(64, 0);
  rows_.assign(64, 0);
  mask_ = 63;
  size_ = 0;
  has_minus_one_ = false;
}

}  // namespace pscore::ps
