// SharedTable's update methods: validate the whole batch, then hand it to the kernel of the
// selected instruction set (kernels.h).
#include <cmath>
#include <stdexcept>
#include <string>

#include "hogwild/coalesce.h"
#include "hogwild/kernels.h"
#include "hogwild/shared_table.h"

namespace pscore::hogwild {
namespace {

template <typename Id>
void check_ids(const Id* ids, uint64_t n, uint64_t rows, const std::string& what) {
  for (uint64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || static_cast<uint64_t>(ids[i]) >= rows) {
      throw std::invalid_argument(what + ": ids[" + std::to_string(i) +
                                  "] = " + std::to_string(ids[i]) + " is out of range [0, " +
                                  std::to_string(rows) + "); nothing was written");
    }
  }
}

void check_finite(double x, const char* name, const std::string& what) {
  if (!std::isfinite(x) || x < 0) {
    throw std::invalid_argument(what + ": " + name + " = " + std::to_string(x) +
                                " must be finite and >= 0");
  }
}

// The batch the kernel gets: `b`, or its coalesced form (stored in `merged`) when asked for and
// some id repeats.
const UpdateBatch& batch_to_apply(const UpdateBatch& b, uint64_t dim, CoalescedBatch* merged) {
  return b.coalesce && coalesce(b, dim, merged) ? merged->batch : b;
}

}  // namespace

void SharedTable::check_batch(const UpdateBatch& b, const char* op) const {
  const std::string w = what(op);
  if (closed()) throw Error(w + ": the table is closed");
  if (b.grads_dtype != dtype()) {
    throw std::invalid_argument(w + ": grads are " + dtype_name(b.grads_dtype) +
                                " but the table holds " + dtype_name(dtype()));
  }
  const uint64_t need = (b.dense ? rows() : b.num_ids) * dim();
  if (b.grads_numel != need) {
    throw std::invalid_argument(
        w + ": grads hold " + std::to_string(b.grads_numel) + " elements; " +
        (b.dense ? std::string("the whole table, ") : std::to_string(b.num_ids) + " ids x ") +
        std::to_string(rows()) + " rows x " + std::to_string(dim()) + " need " +
        std::to_string(need));
  }
  if (need > 0 && !b.grads) throw std::invalid_argument(w + ": grads pointer is null");
  if (b.dense) return;
  if (b.num_ids > 0 && !b.ids) throw std::invalid_argument(w + ": ids pointer is null");
  if (b.ids_dtype == DType::kInt32) {
    check_ids(static_cast<const int32_t*>(b.ids), b.num_ids, rows(), w);
  } else if (b.ids_dtype == DType::kInt64) {
    check_ids(static_cast<const int64_t*>(b.ids), b.num_ids, rows(), w);
  } else {
    throw std::invalid_argument(w + ": ids are " + dtype_name(b.ids_dtype) +
                                "; pass int32 or int64");
  }
}

void SharedTable::require_state(OptimizerState needed, const char* op) const {
  if (optimizer() != needed) {
    throw std::invalid_argument(what(op) + ": the table was created with optimizer='" +
                                optimizer_name(optimizer()) + "'; " + op + " needs optimizer='" +
                                optimizer_name(needed) + "' (its state lives in the segment)");
  }
}

LockStripes SharedTable::lock_stripes_for(const UpdateBatch& b, const char* what) const {
  const SegmentHeader& h = header();
  // Looked up once per locked batch (in a forked child, that first registers the child).
  const int32_t tag = b.locked ? segment_->lock_tag() : 0;
  return LockStripes{segment_->locks(),
                     h.lock_stripes,
                     h.layout.granule_rows,
                     segment_->lock_timeout_ms(),
                     what,
                     tag,
                     segment_.get()};
}

KernelCall SharedTable::kernel_call(const UpdateBatch& b, const LockStripes* locks) const {
  KernelCall k;
  k.w = array(-1);
  const uint32_t slots = header().layout.state_slots;
  if (slots > 0) k.s0 = array(0);
  if (slots > 1) k.s1 = array(1);
  k.rows = rows();
  k.dim = dim();
  k.dense = b.dense;
  k.ids = b.ids;
  k.num_ids = b.num_ids;
  k.ids_dtype = b.ids_dtype;
  k.grads = b.grads;
  k.locks = b.locked ? locks : nullptr;
  return k;
}

void SharedTable::sgd(const UpdateBatch& b, const SgdOptions& o) {
  check_batch(b, "sgd on");
  check_finite(o.lr, "lr", what("sgd on"));
  const LockStripes stripes = lock_stripes_for(b, "locked sgd row");
  CoalescedBatch merged;
  KernelCall k = kernel_call(batch_to_apply(b, dim(), &merged), &stripes);
  k.s0 = k.s1 = nullptr;  // SGD touches the parameters only (no state to prefetch)
  k.c[0] = -o.lr;
  kernel(KernelOp::kAxpy, dtype())(k);
  header().update_count.fetch_add(1, std::memory_order_relaxed);
}

void SharedTable::axpy(double alpha, const void* x, uint64_t numel, DType dt, bool locked) {
  if (!std::isfinite(alpha)) {
    throw std::invalid_argument(what("axpy on") + ": alpha = " + std::to_string(alpha) +
                                " is not finite");
  }
  UpdateBatch b;
  b.dense = true;
  b.grads = x;
  b.grads_numel = numel;
  b.grads_dtype = dt;
  b.locked = locked;
  check_batch(b, "axpy on");
  const LockStripes stripes = lock_stripes_for(b, "locked axpy granule");
  KernelCall k = kernel_call(b, &stripes);
  k.s0 = k.s1 = nullptr;
  k.c[0] = alpha;
  kernel(KernelOp::kAxpy, dtype())(k);
  header().update_count.fetch_add(1, std::memory_order_relaxed);
}

void SharedTable::adagrad(const UpdateBatch& b, const AdagradOptions& o) {
  check_batch(b, "adagrad on");
  require_state(OptimizerState::kAdagrad, "adagrad");
  check_finite(o.lr, "lr", what("adagrad on"));
  check_finite(o.eps, "eps", what("adagrad on"));
  const LockStripes stripes = lock_stripes_for(b, "locked adagrad row");
  CoalescedBatch merged;
  KernelCall k = kernel_call(batch_to_apply(b, dim(), &merged), &stripes);
  k.c[0] = o.lr;
  k.c[1] = o.eps;
  kernel(KernelOp::kAdagrad, dtype())(k);
  header().update_count.fetch_add(1, std::memory_order_relaxed);
}

void SharedTable::adam(const UpdateBatch& b, const AdamOptions& o) {
  const std::string w = what("adam on");
  check_batch(b, "adam on");
  require_state(OptimizerState::kAdam, "adam");
  check_finite(o.lr, "lr", w);
  check_finite(o.eps, "eps", w);
  for (double beta : {o.beta1, o.beta2}) {
    if (!(beta >= 0.0 && beta < 1.0)) {
      throw std::invalid_argument(w + ": betas (" + std::to_string(o.beta1) + ", " +
                                  std::to_string(o.beta2) + ") must lie in [0, 1)");
    }
  }
  uint64_t step = o.step;
  if (step == 0) step = header().adam_step.fetch_add(1, std::memory_order_relaxed) + 1;
  const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  const LockStripes stripes = lock_stripes_for(b, "locked adam row");
  CoalescedBatch merged;
  KernelCall k = kernel_call(batch_to_apply(b, dim(), &merged), &stripes);
  k.c[0] = o.beta1;
  k.c[1] = o.beta2;
  k.c[2] = o.lr / bc1;
  k.c[3] = 1.0 / std::sqrt(bc2);
  k.c[4] = o.eps;
  kernel(KernelOp::kAdam, dtype())(k);
  header().update_count.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace pscore::hogwild
