// Open-addressing hash map from int64 sparse ids (any value) to dense row indices: the index a
// sparse table uses to find a row. Each slot keeps key and row together (one cache line visit
// per probe), and batch lookups prefetch slots ahead so that a batch's cache misses overlap.
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
  // For each of n ids, its row; an absent id gets row next_row++ (and is reported in
  // new_rows as its position in ids). Rows of duplicate new ids are shared.
  void find_or_insert_batch(const int64_t* ids, int64_t n, uint32_t* rows, uint32_t& next_row,
                            std::vector<int64_t>& new_rows);
  size_t size() const { return size_; }
  void clear();
  void reserve(size_t n);

 private:
  struct Slot {
    uint64_t key;  // id + 1 (wrapping); 0 marks an empty slot
    uint32_t row;
    uint32_t unused;
  };

 public:
  static constexpr size_t kSlotBytes = sizeof(Slot);  // the index's memory per slot

 private:
  // id -1, whose key would be 0, is kept aside.
  void rehash(size_t capacity);
  size_t slot_of(uint64_t key) const;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
  bool has_minus_one_ = false;
  uint32_t minus_one_row_ = 0;
};

}  // namespace pscore::ps
