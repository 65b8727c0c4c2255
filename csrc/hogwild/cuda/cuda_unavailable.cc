// The kernel side of a build made without a CUDA compiler: it reports that none is there.
#ifndef PSCORE_WITH_CUDA

#include "common/error.h"
#include "hogwild/cuda/launch.h"

namespace pscore::hogwild::cuda {

bool built() { return false; }

int device_count() { return 0; }

double peak_memory_bandwidth(int) { return 0; }

void launch_sparse_update(const SparseUpdate&, const SparseCoefficients&) {
  throw Error("pscore was built without CUDA: no GPU Hogwild kernels");
}

}  // namespace pscore::hogwild::cuda

#endif  // PSCORE_WITH_CUDA
