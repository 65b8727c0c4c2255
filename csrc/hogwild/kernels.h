// The update kernels behind SharedTable, one per (operation, element type). They are compiled
// twice, for baseline x86-64 (SSE2) and for AVX2+FMA (kernel_bodies.h in two translation units),
// and the set the CPU supports is picked at run time.
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "hogwild/owner_lock.h"

namespace pscore::hogwild {

// The locked variant's stripes: row r is guarded by words[(r / granule_rows) % count].
struct LockStripes {
  LockWord* words;
  uint64_t count;
  uint64_t granule_rows;
  int64_t timeout_ms;
  const char* what;
  int32_t tag;             // the lock tag of the handle taking the locks
  const LockOwner* owner;  // that handle: tells whether another holder still lives
};

enum class KernelOp : int { kAxpy = 0, kAdagrad = 1, kAdam = 2, kSgd = 3 };

// One call: the arrays (rows x dim each), the batch (dense: grads for every row in order, ids
// unused) and the coefficients as doubles, converted to T by the kernel:
// axpy {alpha}; sgd {lr, momentum, dampening, nesterov (0/1)}; adagrad {decayed lr, eps};
// adam {beta1, beta2, step_size, inv_sqrt_bc2, eps, param_scale}. sgd, adagrad and adam step
// with grad_sign * g + weight_decay * w (maximize, L2 weight decay).
// The caller has validated everything; kernels never throw except a lock TimeoutError.
struct KernelCall {
  void* w = nullptr;
  void* s0 = nullptr;
  void* s1 = nullptr;
  void* s2 = nullptr;            // amsgrad's max_exp_avg_sq
  uint8_t* row_flags = nullptr;  // sgd with momentum: per row, 1 once its buffer has started
  uint64_t rows = 0;
  uint64_t dim = 0;
  bool dense = false;
  const void* ids = nullptr;
  uint64_t num_ids = 0;
  DType ids_dtype = DType::kInt64;
  const void* grads = nullptr;
  const LockStripes* locks = nullptr;  // nullptr: lock-free
  double c[6] = {0, 0, 0, 0, 0, 0};
  double grad_sign = 1.0;
  double weight_decay = 0.0;
};

using KernelFn = void (*)(const KernelCall&);

enum class KernelIsa : int { kBaseline = 0, kAvx2 = 1 };

// The kernel for op on float32/float64 tables, from the selected instruction set.
KernelFn kernel(KernelOp op, DType dtype);
// The selected set: AVX2+FMA when the CPU has both, unless set_kernel_isa chose otherwise.
KernelIsa kernel_isa();
bool kernel_isa_supported(KernelIsa isa);
// For tests and benchmarks: run the other set. Throws std::invalid_argument if unsupported.
void set_kernel_isa(KernelIsa isa);
const char* kernel_isa_name(KernelIsa isa);

namespace baseline {
KernelFn kernel(KernelOp op, DType dtype);
}
namespace avx2 {
KernelFn kernel(KernelOp op, DType dtype);  // nullptr on a non-x86 build
}

}  // namespace pscore::hogwild
