// Open-addressing hash map from int64 sparse ids (any value) to dense row indices: the index a
// sparse table uses to find a row in one or two cache misses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pscore::ps {

class RowMap {
 public:
  RowMap() { rehash(64); }
  // The row of `id`, or -1.
  int64_t find(int64_t id) const;
  // The row of `id`; inserts it with row `new_row` when absent (then *inserted is true).
  uint32_t find_or_insert(int64_t id, uint32_t new_row, bool* inserted);
  size_t size() const { return size_; }
  void clear();
  void reserve(size_t n);

 private:
  // Slots hold id + 1 (wrapping) as key so that 0 marks an empty slot; id -1, whose key would
  // be 0, is kept aside.
  void rehash(size_t capacity);
  size_t slot_of(uint64_t key) const;
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> rows_;
  size_t mask_ = 0;
  size_t size_ = 0;
  bool has_minus_one_ = false;
  uint32_t minus_one_row_ = 0;
};

}  // namespace pscore::ps
