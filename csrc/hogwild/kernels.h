// The update kernels behind SharedTable, one per (operation, element type). They are compiled
// twice, for baseline x86-64 (SSE2) and for AVX2+FMA (kernel_bodies.h in two translation units),
// and the set the CPU supports is picked at run time.
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "common/optimizer_formulas.h"
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

// One call: the arrays (rows x dim each), the batch (dense: grads for every row in order, ids
// unused) and the coefficients of its optimizer in double (common/optimizer_formulas.h; the
// kernel converts them to T), each with its grad transform (maximize, L2 weight decay). Only the
// struct of the kernel's optimizer is read; axpy reads axpy_alpha.
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
  double axpy_alpha = 0.0;             // w += alpha * grads
  SgdCoefficients<double> sgd;
  AdagradCoefficients<double> adagrad;
  AdamCoefficients<double> adam;  // AdamW too
};

using KernelFn = void (*)(const KernelCall&);

enum class KernelIsa : int { kBaseline = 0, kAvx2 = 1 };

// The kernel for an optimizer on float32/float64 tables, from the selected instruction set
// (kSgd, kAdagrad, kAdam and kAdamW; nullptr for an optimizer Hogwild has no kernel for).
KernelFn kernel(OptimizerKind op, DType dtype);
// w += alpha * x, from the selected instruction set.
KernelFn axpy_kernel(DType dtype);
// The selected set: AVX2+FMA when the CPU has both, unless set_kernel_isa chose otherwise.
KernelIsa kernel_isa();
bool kernel_isa_supported(KernelIsa isa);
// For tests and benchmarks: run the other set. Throws std::invalid_argument if unsupported.
void set_kernel_isa(KernelIsa isa);
const char* kernel_isa_name(KernelIsa isa);

namespace baseline {
KernelFn kernel(OptimizerKind op, DType dtype);
KernelFn axpy_kernel(DType dtype);
}  // namespace baseline
namespace avx2 {
KernelFn kernel(OptimizerKind op, DType dtype);  // nullptr on a non-x86 build
KernelFn axpy_kernel(DType dtype);               // nullptr on a non-x86 build
}  // namespace avx2

}  // namespace pscore::hogwild
