// Sparse row updates (SGD, Adagrad, Adam) for a float32 table in GPU memory. Plain C++ so the
// bindings compile without CUDA headers; a build without a CUDA compiler gets versions that
// throw (cuda_unavailable.cc).
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "common/optimizer_formulas.h"
#include "hogwild/optimizer_options.h"

namespace pscore::hogwild::cuda {

// One sparse batch on the device: table, state and grads are device pointers (float32,
// row-major rows x dim), ids num_ids int32/int64 device ids. Rows that collide inside the batch
// are combined with atomicAdd. kind: kSgd, kAdagrad or kAdam, with its options below (torch.optim's
// names and defaults, hogwild/optimizer_options.h). The GPU kernels take lr, eps and the betas;
// momentum, weight decay, lr decay, amsgrad and maximize are refused. Adam's step is its
// bias-correction step (>= 1). The call returns once the kernels are queued and the ids were
// checked (one sync).
struct SparseUpdate {
  OptimizerKind kind = OptimizerKind::kSgd;
  SgdOptions sgd;
  AdagradOptions adagrad;
  AdamOptions adam;
  float* table = nullptr;
  float* state0 = nullptr;  // Adagrad accumulator, Adam m
  float* state1 = nullptr;  // Adam v
  uint64_t rows = 0;
  uint64_t dim = 0;
  const void* ids = nullptr;
  uint64_t num_ids = 0;
  DType ids_dtype = DType::kInt64;
  const float* grads = nullptr;
  void* stream = nullptr;  // cudaStream_t; nullptr is the legacy default stream
};

// True when this build carries the CUDA kernels.
bool built();
// CUDA devices visible (0 without a driver or without the kernels).
int device_count();
// The device's peak memory bandwidth in bytes/s from its memory clock and bus width (double data
// rate); 0 when the driver does not say. Throws Error for a bad device index.
double peak_memory_bandwidth(int device);
// Throws pscore::Error when not built or on a CUDA failure, std::invalid_argument for bad ids
// (out of range: nothing is written) or coefficients.
void sparse_update(const SparseUpdate& u);

}  // namespace pscore::hogwild::cuda
