// What the CUDA kernels (or, in a build without CUDA, cuda_unavailable.cc) provide to the
// plain C++ side in sparse_update.cc.
#pragma once

#include "hogwild/cuda/cuda_updates.h"
#include "hogwild/cuda/sparse_update_body.h"

namespace pscore::hogwild::cuda {

// Runs a request sparse_update() has checked: ids checked on the device, then the update
// kernels, then one stream synchronisation. Throws std::invalid_argument naming the first
// out-of-range id (nothing written), Error on a CUDA failure.
void launch_sparse_update(const SparseUpdate& u, const SparseCoefficients& c);

}  // namespace pscore::hogwild::cuda
