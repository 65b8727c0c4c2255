// Element-wise reduction kernels (vectorised by the compiler) used by every collective algorithm.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace pscore {

// dst[i] = dst[i] op src[i] for count elements. kAvg reduces as a sum (scale afterwards).
void reduce_into(void* dst, const void* src, size_t count, DType dtype, ReduceOp op);

// dst[i] = a[i] op b[i]; dst may alias a or b.
void reduce_to(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

// dst[i] /= divisor: the final step of kAvg (integer types truncate toward zero).
void divide_by(void* dst, size_t count, DType dtype, size_t divisor);

}  // namespace pscore
