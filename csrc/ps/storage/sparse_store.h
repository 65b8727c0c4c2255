// Row storage of one sparse table on one shard: rows created on first touch with the table's
// initializer, each row's values and optimizer state side by side in chunked slabs (rows never
// move, so growth costs no copy), plus per-row update counts. Not thread-safe: the owning
// table's mutex guards it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

#include "ps/storage/row_map.h"
#include "ps/wire/table_spec.h"

namespace pscore::ps {

// Creating the rows a request needs would pass the table's row limit.
struct TableFull : std::length_error {
  using std::length_error::length_error;
};

class SparseStore {
 public:
  // max_rows: the most rows it may hold (0: 2^32 - 1, the range of a row index).
  SparseStore(int64_t dim, const OptimizerSpec& opt, const InitializerSpec& init,
              int64_t max_rows = 0);

  // The row index of `id`, creating and initialising the row when absent.
  uint32_t find_or_create(int64_t id);
  // rows[i] = the row of ids[i], creating and initialising absent rows. Throws TableFull, with
  // nothing created, when they would not fit.
  void find_or_create_batch(const int64_t* ids, int64_t n, uint32_t* rows);
  // Hints the cache to fetch the start of a row.
  void prefetch(uint32_t row) {
    const float* p = slab(row);
    __builtin_prefetch(p);
    __builtin_prefetch(p + 16);
  }
  // Throws TableFull unless the distinct absent ids among ids[0, n) fit under the row limit.
  void check_room(const int64_t* ids, int64_t n) const;
  // The row index of `id`, or -1.
  int64_t find(int64_t id) const { return map_.find(id); }

  float* values(uint32_t row) { return slab(row); }
  float* state(uint32_t row) { return slab(row) + dim_; }
  int64_t& step(uint32_t row) { return steps_[row]; }
  int64_t id_of(uint32_t row) const { return ids_[row]; }
  int64_t num_rows() const { return static_cast<int64_t>(ids_.size()); }
  int64_t dim() const { return dim_; }
  int num_slots() const { return slots_; }

  // Makes room for `rows` rows now (index and memory, pages faulted in), so that creating them
  // later costs no allocation or page fault on the request path; at most max_rows. Throws
  // std::invalid_argument when that needs more memory than the host has.
  void reserve(int64_t rows);
  // Adds a row with the given contents (checkpoint load); state may be null (fresh state).
  void restore_row(int64_t id, const float* values, const float* state, int64_t step);
  void clear();

 private:
  // Rows live in chunks of at least 1024 rows (2 MB for dim 64), mapped with their pages
  // already faulted in (see allocate_chunk).
  struct ChunkDeleter {
    size_t bytes = 0;
    void operator()(float* p) const;
  };
  static void* allocate_chunk(size_t bytes, bool populate);
  size_t chunk_bytes() const;
  size_t reserved_row_bytes() const;
  float* slab(uint32_t row) const {
    return chunks_[row / rows_per_chunk_].get() + (row % rows_per_chunk_) * row_floats_;
  }
  uint32_t append_row(int64_t id);

  int64_t dim_;
  int64_t max_rows_;
  int slots_;
  int64_t row_floats_;
  OptimizerSpec opt_;
  InitializerSpec init_;
  RowMap map_;
  int64_t rows_per_chunk_;
  std::vector<std::unique_ptr<float, ChunkDeleter>> chunks_;
  std::vector<int64_t> ids_;
  std::vector<int64_t> steps_;
  std::vector<int64_t> new_rows_;  // scratch of find_or_create_batch
};

}  // namespace pscore::ps
