// Repeated ids of a sparse batch summed into one row each, as torch's sparse optimizers do
// (Tensor.coalesce), so an uncoalesced gradient (nn.Embedding(sparse=True)'s) updates each
// row once with the summed gradient instead of once per occurrence.
#pragma once

#include <cstdint>
#include <vector>

#include "hogwild/shared_table.h"

namespace pscore::hogwild {

// The unique ids in order of first appearance and their summed gradients (in the grads' dtype,
// each sum taken in batch order); `batch` is the input batch pointed at them.
struct CoalescedBatch {
  std::vector<int64_t> ids;
  std::vector<double> storage;  // the summed gradients, as float or double
  UpdateBatch batch;
};

// False when no id repeats: then nothing is allocated and the batch is used as it is.
// `b` is a validated sparse batch of rows `dim` wide.
bool coalesce(const UpdateBatch& b, uint64_t dim, CoalescedBatch* out);

}  // namespace pscore::hogwild
