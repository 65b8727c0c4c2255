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
  if (slots > 2) k.s2 = array(2);
  if (optimizer() == OptimizerState::kMomentum) k.row_flags = row_flags();
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

uint64_t SharedTable::next_step(uint64_t given) {
  return given != 0 ? given : header().step.fetch_add(1, std::memory_order_relaxed) + 1;
}

// Plain SGD (maximize only flips the sign) is an axpy; weight decay or momentum take the SGD
// kernel, momentum with its buffer and row flags.
void SharedTable::sgd(const UpdateBatch& b, const SgdOptions& o) {
  const std::string w = what("sgd on");
  check_batch(b, "sgd on");
  check_options(o, w);
  if (o.momentum != 0 && optimizer() != OptimizerState::kMomentum) {
    throw std::invalid_argument(w + ": momentum > 0 needs a table created with " +
                                "optimizer='momentum' (its buffer lives in the segment); this " +
                                "one has optimizer='" + optimizer_name(optimizer()) + "'");
  }
  const LockStripes stripes = lock_stripes_for(b, "locked sgd row");
  CoalescedBatch merged;
  KernelCall k = kernel_call(batch_to_apply(b, dim(), &merged), &stripes);
  k.s1 = k.s2 = nullptr;
  if (o.momentum == 0) {  // the buffer is SGD's only state
    k.s0 = nullptr;
    k.row_flags = nullptr;
  }
  if (o.momentum == 0 && o.weight_decay == 0) {
    k.axpy_alpha = o.maximize ? o.lr : -o.lr;
    axpy_kernel(dtype())(k);
  } else {
    k.sgd = sgd_coefficients(o.lr, o.momentum, o.dampening, o.nesterov,
                             grad_transform(o.maximize, o.weight_decay));
    kernel(OptimizerKind::kSgd, dtype())(k);
  }
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
  k.axpy_alpha = alpha;
  axpy_kernel(dtype())(k);
  header().update_count.fetch_add(1, std::memory_order_relaxed);
}

void SharedTable::adagrad(const UpdateBatch& b, const AdagradOptions& o) {
  check_batch(b, "adagrad on");
  require_state(OptimizerState::kAdagrad, "adagrad");
  check_options(o, what("adagrad on"));
  const uint64_t step = next_step(o.step);
  const LockStripes stripes = lock_stripes_for(b, "locked adagrad row");
  CoalescedBatch merged;
  KernelCall k = kernel_call(batch_to_apply(b, dim(), &merged), &stripes);
  k.adagrad = adagrad_coefficients(o.lr, o.lr_decay, o.eps, step,
                                   grad_transform(o.maximize, o.weight_decay));
  kernel(OptimizerKind::kAdagrad, dtype())(k);
  header().update_count.fetch_add(1, std::memory_order_relaxed);
}

void SharedTable::adam(const UpdateBatch& b, const AdamOptions& o) {
  const std::string w = what("adam on");
  check_batch(b, "adam on");
  if (o.amsgrad) {
    require_state(OptimizerState::kAmsgrad, "adam with amsgrad");
  } else if (optimizer() != OptimizerState::kAmsgrad) {
    require_state(OptimizerState::kAdam, "adam");
  }
  check_options(o, w);
  const uint64_t step = next_step(o.step);
  const LockStripes stripes = lock_stripes_for(b, "locked adam row");
  CoalescedBatch merged;
  KernelCall k = kernel_call(batch_to_apply(b, dim(), &merged), &stripes);
  if (!o.amsgrad) k.s2 = nullptr;  // an amsgrad table stepped without it keeps its maximum
  k.adam = adam_coefficients(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                             o.decoupled_weight_decay, o.maximize, step);
  kernel(o.decoupled_weight_decay ? OptimizerKind::kAdamW : OptimizerKind::kAdam, dtype())(k);
  header().update_count.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace pscore::hogwild
