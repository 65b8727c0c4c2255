// SharedTable's update methods: validate the whole batch, then dispatch on the element and id
// types to the row kernels.
#include <cmath>
#include <stdexcept>
#include <string>

#include "hogwild/apply_rows.h"
#include "hogwild/row_kernels.h"
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

// Calls fn(Id*) with the batch's ids cast to their type (nullptr for a dense batch).
template <typename Fn>
void with_ids(const UpdateBatch& b, Fn fn) {
  if (b.dense) {
    fn(static_cast<const int64_t*>(nullptr));
  } else if (b.ids_dtype == DType::kInt32) {
    fn(static_cast<const int32_t*>(b.ids));
  } else {
    fn(static_cast<const int64_t*>(b.ids));
  }
}

template <typename T, typename Id, typename Fn>
void apply(const RowArrays<T>& a, uint64_t rows, const UpdateBatch& b, const Id* ids,
           const LockStripes* locks, Fn fn) {
  const T* g = static_cast<const T*>(b.grads);
  if (!b.dense) {
    apply_sparse(a, ids, b.num_ids, g, locks, fn);
  } else {
    apply_dense(a, rows, g, locks, fn);
  }
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

LockStripes SharedTable::lock_stripes_for(const char* what) const {
  const SegmentHeader& h = header();
  return LockStripes{segment_->locks(), h.lock_stripes, h.layout.granule_rows,
                     segment_->lock_timeout_ms(), what};
}

void SharedTable::sgd(const UpdateBatch& b, const SgdOptions& o) {
  check_batch(b, "sgd on");
  check_finite(o.lr, "lr", what("sgd on"));
  const LockStripes stripes = lock_stripes_for("locked sgd row");
  const LockStripes* locks = b.locked ? &stripes : nullptr;
  with_ids(b, [&](auto* ids) {
    if (dtype() == DType::kFloat32) {
      RowArrays<float> a{static_cast<float*>(array(-1)), nullptr, nullptr, dim()};
      const float alpha = static_cast<float>(-o.lr);
      apply(a, rows(), b, ids, locks,
            [&](uint64_t off, const float* g, uint64_t n) { axpy_row(a.w + off, g, n, alpha); });
    } else {
      RowArrays<double> a{static_cast<double*>(array(-1)), nullptr, nullptr, dim()};
      const double alpha = -o.lr;
      apply(a, rows(), b, ids, locks,
            [&](uint64_t off, const double* g, uint64_t n) { axpy_row(a.w + off, g, n, alpha); });
    }
  });
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
  const LockStripes stripes = lock_stripes_for("locked axpy granule");
  const LockStripes* locks = locked ? &stripes : nullptr;
  if (dtype() == DType::kFloat32) {
    RowArrays<float> a{static_cast<float*>(array(-1)), nullptr, nullptr, dim()};
    const float al = static_cast<float>(alpha);
    apply_dense(a, rows(), static_cast<const float*>(x), locks,
                [&](uint64_t off, const float* g, uint64_t n) { axpy_row(a.w + off, g, n, al); });
  } else {
    RowArrays<double> a{static_cast<double*>(array(-1)), nullptr, nullptr, dim()};
    apply_dense(
        a, rows(), static_cast<const double*>(x), locks,
        [&](uint64_t off, const double* g, uint64_t n) { axpy_row(a.w + off, g, n, alpha); });
  }
  header().update_count.fetch_add(1, std::memory_order_relaxed);
}

template <typename T>
static void run_adagrad(SharedTable& t, const UpdateBatch& b, const AdagradOptions& o,
                        const LockStripes* locks, uint64_t rows, uint64_t dim) {
  RowArrays<T> a{static_cast<T*>(t.array(-1)), static_cast<T*>(t.array(0)), nullptr, dim};
  const AdagradCoeffs<T> c{static_cast<T>(o.lr), static_cast<T>(o.eps)};
  with_ids(b, [&](auto* ids) {
    apply(a, rows, b, ids, locks, [&](uint64_t off, const T* g, uint64_t n) {
      adagrad_row(a.w + off, a.s0 + off, g, n, c);
    });
  });
}

void SharedTable::adagrad(const UpdateBatch& b, const AdagradOptions& o) {
  check_batch(b, "adagrad on");
  require_state(OptimizerState::kAdagrad, "adagrad");
  check_finite(o.lr, "lr", what("adagrad on"));
  check_finite(o.eps, "eps", what("adagrad on"));
  const LockStripes stripes = lock_stripes_for("locked adagrad row");
  const LockStripes* locks = b.locked ? &stripes : nullptr;
  if (dtype() == DType::kFloat32) {
    run_adagrad<float>(*this, b, o, locks, rows(), dim());
  } else {
    run_adagrad<double>(*this, b, o, locks, rows(), dim());
  }
  header().update_count.fetch_add(1, std::memory_order_relaxed);
}

template <typename T>
static void run_adam(SharedTable& t, const UpdateBatch& b, const AdamOptions& o, uint64_t step,
                     const LockStripes* locks, uint64_t rows, uint64_t dim) {
  RowArrays<T> a{static_cast<T*>(t.array(-1)), static_cast<T*>(t.array(0)),
                 static_cast<T*>(t.array(1)), dim};
  const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  const AdamCoeffs<T> c{static_cast<T>(o.beta1), static_cast<T>(o.beta2),
                        static_cast<T>(o.lr / bc1), static_cast<T>(1.0 / std::sqrt(bc2)),
                        static_cast<T>(o.eps)};
  with_ids(b, [&](auto* ids) {
    apply(a, rows, b, ids, locks, [&](uint64_t off, const T* g, uint64_t n) {
      adam_row(a.w + off, a.s0 + off, a.s1 + off, g, n, c);
    });
  });
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
  const LockStripes stripes = lock_stripes_for("locked adam row");
  const LockStripes* locks = b.locked ? &stripes : nullptr;
  if (dtype() == DType::kFloat32) {
    run_adam<float>(*this, b, o, step, locks, rows(), dim());
  } else {
    run_adam<double>(*this, b, o, step, locks, rows(), dim());
  }
  header().update_count.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace pscore::hogwild
