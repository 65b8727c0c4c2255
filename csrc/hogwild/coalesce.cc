#include "hogwild/coalesce.h"

namespace pscore::hogwild {
namespace {

// Open addressing over the batch's ids (validated >= 0, so -1 marks a free slot): each id's
// index among the unique ids, in order of first appearance.
class UniqueIds {
 public:
  explicit UniqueIds(uint64_t n) {
    while (capacity_ < 2 * n) capacity_ *= 2;
    keys_.assign(capacity_, -1);
    index_.resize(capacity_);
  }

  // The index of `id` among the unique ids, appending it to `unique` when new.
  uint64_t index_of(int64_t id, std::vector<int64_t>& unique) {
    uint64_t h = (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> 20;
    for (;; ++h) {
      const uint64_t s = h & (capacity_ - 1);
      if (keys_[s] == id) return index_[s];
      if (keys_[s] == -1) {
        keys_[s] = id;
        index_[s] = unique.size();
        unique.push_back(id);
        return index_[s];
      }
    }
  }

 private:
  uint64_t capacity_ = 16;
  std::vector<int64_t> keys_;
  std::vector<uint64_t> index_;
};

template <typename Id>
std::vector<uint64_t> unique_index(const UpdateBatch& b, std::vector<int64_t>& unique) {
  const Id* ids = static_cast<const Id*>(b.ids);
  UniqueIds table(b.num_ids);
  std::vector<uint64_t> where(b.num_ids);
  for (uint64_t i = 0; i < b.num_ids; ++i) where[i] = table.index_of(ids[i], unique);
  return where;
}

// Adds row i of `grads` (T) into sum row where[i], in batch order.
template <typename T>
void sum_rows(const std::vector<uint64_t>& where, uint64_t unique, const void* grads, uint64_t dim,
              std::vector<double>& storage) {
  storage.assign((unique * dim * sizeof(T) + sizeof(double) - 1) / sizeof(double), 0.0);
  T* sums = reinterpret_cast<T*>(storage.data());
  const T* g = static_cast<const T*>(grads);
  for (uint64_t i = 0; i < where.size(); ++i) {
    T* row = sums + where[i] * dim;
    const T* src = g + i * dim;
    for (uint64_t j = 0; j < dim; ++j) row[j] += src[j];
  }
}

}  // namespace

bool coalesce(const UpdateBatch& b, uint64_t dim, CoalescedBatch* out) {
  if (b.dense || b.num_ids < 2) return false;
  out->ids.clear();
  const std::vector<uint64_t> where = b.ids_dtype == DType::kInt32
                                          ? unique_index<int32_t>(b, out->ids)
                                          : unique_index<int64_t>(b, out->ids);
  if (out->ids.size() == b.num_ids) return false;
  if (b.grads_dtype == DType::kFloat32) {
    sum_rows<float>(where, out->ids.size(), b.grads, dim, out->storage);
  } else {
    sum_rows<double>(where, out->ids.size(), b.grads, dim, out->storage);
  }
  out->batch = b;
  out->batch.ids = out->ids.data();
  out->batch.num_ids = out->ids.size();
  out->batch.ids_dtype = DType::kInt64;
  out->batch.grads = out->storage.data();
  out->batch.grads_numel = out->ids.size() * dim;
  return true;
}

}  // namespace pscore::hogwild
