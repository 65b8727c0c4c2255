// The CUDA entry points of a build made without a CUDA compiler: they report why they cannot run.
#ifndef PSCORE_WITH_CUDA

#include "common/error.h"
#include "hogwild/cuda/cuda_updates.h"

namespace pscore::hogwild::cuda {

bool built() { return false; }

int device_count() { return 0; }

void sparse_update(const SparseUpdate&) {
  throw Error(
      "pscore was built without CUDA (CMake found no CUDA compiler), so the GPU Hogwild kernels "
      "are not available; rebuild with nvcc on PATH or use the CPU SharedTable");
}

}  // namespace pscore::hogwild::cuda

#endif  // PSCORE_WITH_CUDA
