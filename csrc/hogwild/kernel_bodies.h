// The kernels' code, compiled once per instruction set: a translation unit defines
// PSCORE_KERNEL_ISA (the namespace, so the copies never merge at link time), optionally switches
// the target (#pragma GCC target) and includes this file, which defines <isa>::kernel().
//
// A sparse batch walks its ids and prefetches the rows a few ids ahead (random rows of a big
// table are cache and TLB misses); a dense batch is one long span. With lock stripes, every row
// (or granule of rows) is updated under its stripe's lock.
#pragma once

#include <cstdint>

#include "hogwild/kernels.h"
#include "hogwild/owner_lock.h"
#include "hogwild/row_kernels.h"

#ifndef PSCORE_PREFETCH_AHEAD
#define PSCORE_PREFETCH_AHEAD 6
#endif

namespace pscore::hogwild::PSCORE_KERNEL_ISA {

constexpr uint64_t kPrefetchAhead = PSCORE_PREFETCH_AHEAD;  // ids ahead of the one updated
constexpr uint64_t kPrefetchLines = 8;  // per row and array; the hardware streams the rest

// Always inlined: GCC finds a function that only prefetches to be "const" and deletes the
// calls to it that it did not inline.
#define PSCORE_ALWAYS_INLINE inline __attribute__((always_inline))

PSCORE_ALWAYS_INLINE void prefetch_bytes(const void* p, uint64_t nbytes) {
  const char* c = static_cast<const char*>(p);
  for (uint64_t k = 0; k < kPrefetchLines; ++k) {
    if (k * 64 < nbytes) __builtin_prefetch(c + k * 64, 1, 3);
  }
}

template <typename T>
PSCORE_ALWAYS_INLINE void prefetch_row(const KernelCall& k, uint64_t row) {
  const uint64_t off = row * k.dim;
  const uint64_t nbytes = k.dim * sizeof(T);
  prefetch_bytes(static_cast<T*>(k.w) + off, nbytes);
  if (k.s0) prefetch_bytes(static_cast<T*>(k.s0) + off, nbytes);
  if (k.s1) prefetch_bytes(static_cast<T*>(k.s1) + off, nbytes);
  if (k.s2) prefetch_bytes(static_cast<T*>(k.s2) + off, nbytes);
}

inline LockWord& stripe_for(const LockStripes& l, uint64_t row) {
  return l.words[(row / l.granule_rows) % l.count];
}

// fn(offset, grad, count) updates `count` elements from element `offset` of every array.
template <typename T, typename Id, typename Fn>
void for_sparse_rows(const KernelCall& k, const Id* ids, Fn fn) {
  const T* grads = static_cast<const T*>(k.grads);
  for (uint64_t i = 0; i < kPrefetchAhead && i < k.num_ids; ++i) {  // fill the pipeline
    prefetch_row<T>(k, static_cast<uint64_t>(ids[i]));
  }
  for (uint64_t i = 0; i < k.num_ids; ++i) {
    if (i + kPrefetchAhead < k.num_ids) {
      prefetch_row<T>(k, static_cast<uint64_t>(ids[i + kPrefetchAhead]));
    }
    const uint64_t row = static_cast<uint64_t>(ids[i]);
    if (k.locks) {
      LockGuard guard(stripe_for(*k.locks, row), k.locks->tag, *k.locks->owner, k.locks->timeout_ms,
                      k.locks->what);
      fn(row * k.dim, grads + i * k.dim, k.dim);
    } else {
      fn(row * k.dim, grads + i * k.dim, k.dim);
    }
  }
}

// Every row in order: one span when lock-free, one granule at a time under its lock otherwise.
template <typename T, typename Fn>
void for_all_rows(const KernelCall& k, Fn fn) {
  const T* grads = static_cast<const T*>(k.grads);
  if (!k.locks) {
    fn(0, grads, k.rows * k.dim);
    return;
  }
  const uint64_t step = k.locks->granule_rows;
  for (uint64_t r = 0; r < k.rows; r += step) {
    const uint64_t count = k.rows - r < step ? k.rows - r : step;
    LockGuard guard(stripe_for(*k.locks, r), k.locks->tag, *k.locks->owner, k.locks->timeout_ms,
                    k.locks->what);
    fn(r * k.dim, grads + r * k.dim, count * k.dim);
  }
}

template <typename T, typename Fn>
void for_rows(const KernelCall& k, Fn fn) {
  if (k.dense) {
    for_all_rows<T>(k, fn);
  } else if (k.ids_dtype == DType::kInt32) {
    for_sparse_rows<T>(k, static_cast<const int32_t*>(k.ids), fn);
  } else {
    for_sparse_rows<T>(k, static_cast<const int64_t*>(k.ids), fn);
  }
}

template <typename T>
void run_axpy(const KernelCall& k) {
  T* w = static_cast<T*>(k.w);
  const T alpha = static_cast<T>(k.axpy_alpha);
  for_rows<T>(k, [&](uint64_t off, const T* g, uint64_t n) { axpy_row(w + off, g, n, alpha); });
}

// Row by row, even inside a dense span: each row has its own momentum-started flag.
template <typename T>
void run_sgd(const KernelCall& k) {
  T* w = static_cast<T*>(k.w);
  T* buf = static_cast<T*>(k.s0);
  const SgdCoefficients<T> c = k.sgd.as<T>();
  for_rows<T>(k, [&](uint64_t off, const T* g, uint64_t n) {
    for (uint64_t r = off / k.dim, end = (off + n) / k.dim; r < end; ++r, g += k.dim) {
      const uint64_t at = r * k.dim;
      sgd_row(w + at, buf ? buf + at : nullptr, k.row_flags ? k.row_flags + r : nullptr, g, k.dim,
              c);
    }
  });
}

template <typename T>
void run_adagrad(const KernelCall& k) {
  T* w = static_cast<T*>(k.w);
  T* acc = static_cast<T*>(k.s0);
  const AdagradCoefficients<T> c = k.adagrad.as<T>();
  for_rows<T>(
      k, [&](uint64_t off, const T* g, uint64_t n) { adagrad_row(w + off, acc + off, g, n, c); });
}

template <typename T>
void run_adam(const KernelCall& k) {
  T* w = static_cast<T*>(k.w);
  T* m = static_cast<T*>(k.s0);
  T* v = static_cast<T*>(k.s1);
  T* vmax = static_cast<T*>(k.s2);
  const AdamCoefficients<T> c = k.adam.as<T>();
  for_rows<T>(k, [&](uint64_t off, const T* g, uint64_t n) {
    adam_row(w + off, m + off, v + off, vmax ? vmax + off : nullptr, g, n, c);
  });
}

KernelFn kernel(OptimizerKind op, DType dtype) {
  const bool f32 = dtype == DType::kFloat32;
  switch (op) {
    case OptimizerKind::kSgd:
      return f32 ? &run_sgd<float> : &run_sgd<double>;
    case OptimizerKind::kAdagrad:
      return f32 ? &run_adagrad<float> : &run_adagrad<double>;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      return f32 ? &run_adam<float> : &run_adam<double>;
    case OptimizerKind::kRmsprop:
      return nullptr;
  }
  return nullptr;
}

KernelFn axpy_kernel(DType dtype) {
  return dtype == DType::kFloat32 ? &run_axpy<float> : &run_axpy<double>;
}

}  // namespace pscore::hogwild::PSCORE_KERNEL_ISA
