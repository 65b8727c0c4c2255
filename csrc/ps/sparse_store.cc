#include "ps/sparse_store.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "ps/initializer.h"
#include "ps/optimizer.h"

namespace pscore::ps {
namespace {

constexpr size_t kChunkBytes = size_t(2) << 20;

}  // namespace

SparseStore::SparseStore(int64_t dim, const OptimizerSpec& opt, const InitializerSpec& init)
    : dim_(dim),
      slots_(opt.num_slots()),
      row_floats_(dim * (1 + opt.num_slots())),
      opt_(opt),
      init_(init) {
  const size_t row_bytes = static_cast<size_t>(row_floats_) * sizeof(float);
  rows_per_chunk_ = std::max<int64_t>(1024, static_cast<int64_t>(kChunkBytes / row_bytes));
}

uint32_t SparseStore::append_row(int64_t id) {
  if (ids_.size() >= 0xffffffffull) throw std::length_error("sparse table shard is full");
  uint32_t row = static_cast<uint32_t>(ids_.size());
  if (row % rows_per_chunk_ == 0) {
    size_t bytes = static_cast<size_t>(rows_per_chunk_ * row_floats_) * sizeof(float);
    bytes = (bytes + kChunkBytes - 1) / kChunkBytes * kChunkBytes;
    void* p = std::aligned_alloc(kChunkBytes, bytes);
    if (!p) throw std::bad_alloc();
    chunks_.emplace_back(static_cast<float*>(p));
  }
  ids_.push_back(id);
  steps_.push_back(0);
  return row;
}

uint32_t SparseStore::find_or_create(int64_t id) {
  bool inserted = false;
  uint32_t row = map_.find_or_insert(id, static_cast<uint32_t>(ids_.size()), &inserted);
  if (!inserted) return row;
  append_row(id);
  fill_initial_values(init_, id, 0, values(row), dim_);
  init_optimizer_state(opt_, state(row), dim_);
  return row;
}

void SparseStore::find_or_create_batch(const int64_t* ids, int64_t n, uint32_t* rows) {
  uint32_t next = static_cast<uint32_t>(ids_.size());
  new_rows_.clear();
  map_.find_or_insert_batch(ids, n, rows, next, new_rows_);
  for (int64_t i : new_rows_) {
    uint32_t row = append_row(ids[i]);
    fill_initial_values(init_, ids[i], 0, values(row), dim_);
    init_optimizer_state(opt_, state(row), dim_);
  }
}

void SparseStore::restore_row(int64_t id, const float* values_in, const float* state_in,
                              int64_t step_in) {
  bool inserted = false;
  uint32_t row = map_.find_or_insert(id, static_cast<uint32_t>(ids_.size()), &inserted);
  if (inserted) append_row(id);
  std::memcpy(values(row), values_in, sizeof(float) * dim_);
  if (state_in)
    std::memcpy(state(row), state_in, sizeof(float) * dim_ * slots_);
  else
    init_optimizer_state(opt_, state(row), dim_);
  steps_[row] = step_in;
}

void SparseStore::clear() {
  map_.clear();
  chunks_.clear();
  ids_.clear();
  steps_.clear();
}

}  // namespace pscore::ps
