#include "ps/storage/sparse_accumulator.h"

#include <cstring>

#include "ps/storage/optimizer.h"

namespace pscore::ps {

void SparseAccumulator::add(int64_t n, const int64_t* ids, const float* grads) {
  index_.reserve(ids_.size() + static_cast<size_t>(n));
  sums_.reserve(sums_.size() + static_cast<size_t>(n * dim_));
  for (int64_t i = 0; i < n; ++i) {
    bool inserted = false;
    uint32_t at = index_.find_or_insert(ids[i], static_cast<uint32_t>(ids_.size()), &inserted);
    const float* g = grads + i * dim_;
    if (inserted) {
      ids_.push_back(ids[i]);
      sums_.insert(sums_.end(), g, g + dim_);
    } else {
      add_in_place(sums_.data() + static_cast<int64_t>(at) * dim_, g, dim_);
    }
  }
}

void SparseAccumulator::scale(float factor) {
  scale_in_place(sums_.data(), static_cast<int64_t>(sums_.size()), factor);
}

void SparseAccumulator::clear() {
  index_.clear();
  ids_.clear();
  sums_.clear();
}

}  // namespace pscore::ps
