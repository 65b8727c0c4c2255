// Sums sparse gradient rows by id: merges duplicate ids within a push and collects the pushes of
// a sync round before they are applied once.
#pragma once

#include <cstdint>
#include <vector>

#include "ps/storage/row_map.h"

namespace pscore::ps {

class SparseAccumulator {
 public:
  explicit SparseAccumulator(int64_t dim) : dim_(dim) {}
  void add(int64_t n, const int64_t* ids, const float* grads);
  void scale(float factor);
  void clear();
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  const int64_t* ids() const { return ids_.data(); }
  const float* grads() const { return sums_.data(); }

 private:
  int64_t dim_;
  RowMap index_;
  std::vector<int64_t> ids_;
  std::vector<float> sums_;
};

}  // namespace pscore::ps
