#include "ps/storage/sparse_store.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "ps/storage/initializer.h"
#include "ps/storage/optimizer.h"

namespace pscore::ps {
namespace {

constexpr size_t kChunkBytes = size_t(2) << 20;

}  // namespace

void* SparseStore::allocate_chunk(size_t bytes, bool populate) {
  // With `populate` every page is faulted in now, in one call; otherwise each 4 KB page faults
  // (a trap, zeroing and a memory-cgroup charge: ~1 us per row of dim 64 on the VM we profiled)
  // when the first row on it is created.
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

// The memory a reserved row takes up front: its floats and two index slots.
size_t SparseStore::reserved_row_bytes() const {
  return static_cast<size_t>(row_floats_) * sizeof(float) + 2 * RowMap::kSlotBytes;
}

void SparseStore::reserve(int64_t rows) {
  rows = std::min(rows, max_rows_);  // rows past the limit are never made
  if (rows <= num_rows()) return;
  const uint64_t bytes = static_cast<uint64_t>(rows) * reserved_row_bytes();
  const uint64_t host = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                        static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (bytes > host) {
    throw std::invalid_argument("reserving " + std::to_string(rows) + " rows takes " +
                                std::to_string(bytes) + " bytes, more than this host's " +
                                std::to_string(host));
  }
  map_.reserve(static_cast<size_t>(rows));
  const int64_t chunks = (rows + rows_per_chunk_ - 1) / rows_per_chunk_;
  while (static_cast<int64_t>(chunks_.size()) < chunks) {
    const size_t bytes = chunk_bytes();
    chunks_.emplace_back(static_cast<float*>(allocate_chunk(bytes, true)), ChunkDeleter{bytes});
  }
}

size_t SparseStore::chunk_bytes() const {
  size_t bytes = static_cast<size_t>(rows_per_chunk_ * row_floats_) * sizeof(float);
  return (bytes + kChunkBytes - 1) / kChunkBytes * kChunkBytes;
}

void SparseStore::ChunkDeleter::operator()(float* p) const { ::munmap(p, bytes); }

SparseStore::SparseStore(int64_t dim, const OptimizerSpec& opt, const InitializerSpec& init,
                         int64_t max_rows)
    : dim_(dim),
      max_rows_(max_rows > 0 ? max_rows : int64_t{0xffffffff}),
      slots_(opt.num_slots()),
      row_floats_(dim * (1 + opt.num_slots())),
      opt_(opt),
      init_(init) {
  const size_t row_bytes = static_cast<size_t>(row_floats_) * sizeof(float);
  rows_per_chunk_ = std::max<int64_t>(1024, static_cast<int64_t>(kChunkBytes / row_bytes));
}

void SparseStore::check_room(const int64_t* ids, int64_t n) const {
  const int64_t have = num_rows();
  if (have + n <= max_rows_) return;  // even if every id is new
  std::unordered_set<int64_t> fresh;
  for (int64_t i = 0; i < n; ++i)
    if (map_.find(ids[i]) < 0) fresh.insert(ids[i]);
  const int64_t need = have + static_cast<int64_t>(fresh.size());
  if (need > max_rows_) {
    throw TableFull("it holds " + std::to_string(have) + " rows, and " +
                    std::to_string(fresh.size()) + " new ids would make " + std::to_string(need) +
                    ", past max_rows_per_shard=" + std::to_string(max_rows_));
  }
}

uint32_t SparseStore::append_row(int64_t id) {
  if (ids_.size() >= 0xffffffffull) throw TableFull("the shard holds 2^32 - 1 rows");
  uint32_t row = static_cast<uint32_t>(ids_.size());
  if (row / rows_per_chunk_ >= static_cast<int64_t>(chunks_.size())) {
    const size_t bytes = chunk_bytes();
    chunks_.emplace_back(static_cast<float*>(allocate_chunk(bytes, false)), ChunkDeleter{bytes});
  }
  ids_.push_back(id);
  steps_.push_back(0);
  return row;
}

uint32_t SparseStore::find_or_create(int64_t id) {
  check_room(&id, 1);
  bool inserted = false;
  uint32_t row = map_.find_or_insert(id, static_cast<uint32_t>(ids_.size()), &inserted);
  if (!inserted) return row;
  append_row(id);
  fill_initial_values(init_, id, 0, values(row), dim_);
  init_optimizer_state(opt_, state(row), dim_);
  return row;
}

void SparseStore::find_or_create_batch(const int64_t* ids, int64_t n, uint32_t* rows) {
  check_room(ids, n);
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
