#include "ps/storage/row_map.h"

#include "ps/storage/initializer.h"

namespace pscore::ps {

size_t RowMap::slot_of(uint64_t key) const { return mix64(key) & mask_; }

int64_t RowMap::find(int64_t id) const {
  if (id == -1) return has_minus_one_ ? minus_one_row_ : -1;
  const uint64_t key = static_cast<uint64_t>(id) + 1;
  for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
    if (slots_[s].key == key) return slots_[s].row;
    if (slots_[s].key == 0) return -1;
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
  if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
  const uint64_t key = static_cast<uint64_t>(id) + 1;
  for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
    if (slots_[s].key == key) return slots_[s].row;
    if (slots_[s].key == 0) {
      slots_[s].key = key;
      slots_[s].row = new_row;
      ++size_;
      *inserted = true;
      return new_row;
    }
  }
}

void RowMap::find_or_insert_batch(const int64_t* ids, int64_t n, uint32_t* rows, uint32_t& next_row,
                                  std::vector<int64_t>& new_rows) {
  reserve(size_ + static_cast<size_t>(n));  // no rehash inside the batch
  constexpr int64_t kAhead = 16;
  for (int64_t i = 0; i < n && i < kAhead; ++i)
    __builtin_prefetch(&slots_[slot_of(static_cast<uint64_t>(ids[i]) + 1)]);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n)
      __builtin_prefetch(&slots_[slot_of(static_cast<uint64_t>(ids[i + kAhead]) + 1)]);
    bool inserted = false;
    rows[i] = find_or_insert(ids[i], next_row, &inserted);
    if (inserted) {
      ++next_row;
      new_rows.push_back(i);
    }
  }
}

void RowMap::rehash(size_t capacity) {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(capacity, Slot{0, 0, 0});
  mask_ = capacity - 1;
  for (const Slot& o : old) {
    if (o.key == 0) continue;
    size_t s = slot_of(o.key);
    while (slots_[s].key != 0) s = (s + 1) & mask_;
    slots_[s] = o;
  }
}

void RowMap::reserve(size_t n) {
  size_t cap = slots_.size();
  while (n * 2 > cap) cap *= 2;
  if (cap != slots_.size()) rehash(cap);
}

void RowMap::clear() {
  slots_.assign(64, Slot{0, 0, 0});
  mask_ = 63;
  size_ = 0;
  has_minus_one_ = false;
}

}  // namespace pscore::ps
