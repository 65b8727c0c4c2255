// The per-row update arithmetic of each optimizer: one pass over a row (in chunks that stay in
// L1), written as plain loops over __restrict pointers so -O3 vectorises them; square roots go
// through sqrt_inplace. The coefficients and the per-element formulas are those of
// common/optimizer_formulas.h. Part of the kernel bodies: include only from kernel_bodies.h.
#pragma once

#include <cstdint>

#include "common/optimizer_formulas.h"
#include "hogwild/vector_sqrt.h"

namespace pscore::hogwild::PSCORE_KERNEL_ISA {

// Elements handled per chunk: the chunk's temporaries live on the stack, in L1.
constexpr uint64_t kRowChunk = 256;

// w += alpha * x (SGD is alpha = -lr).
template <typename T>
inline void axpy_row(T* __restrict w, const T* __restrict x, uint64_t n, T alpha) {
  for (uint64_t j = 0; j < n; ++j) w[j] += alpha * x[j];
}

// The chunk's g' in `out` (kRowChunk elements), or g itself when the transform is the identity.
template <typename T>
inline const T* transformed_grad(const T* __restrict w, const T* __restrict g, uint64_t n,
                                 GradTransform<T> t, T* __restrict out) {
  if (t.identity()) return g;
  for (uint64_t j = 0; j < n; ++j) out[j] = t.apply(g[j], w[j]);
  return out;
}

// SGD (SgdCoefficients): the buffer starts as g' on the row's first step.
template <typename T>
inline void sgd_chunk(T* __restrict w, T* __restrict buf, bool started, const T* __restrict g,
                      uint64_t n, const SgdCoefficients<T>& c) {
  alignas(64) T gt[kRowChunk];
  const T* ge = transformed_grad(w, g, n, c.grad, gt);
  if (!buf) {
    for (uint64_t j = 0; j < n; ++j) w[j] += sgd_delta(ge[j], c);
    return;
  }
  if (started) {
    for (uint64_t j = 0; j < n; ++j) buf[j] = sgd_next_buffer(buf[j], ge[j], c);
  } else {
    for (uint64_t j = 0; j < n; ++j) buf[j] = ge[j];
  }
  for (uint64_t j = 0; j < n; ++j) w[j] += sgd_delta(sgd_direction(ge[j], buf[j], c), c);
}

// One row; `started` is the row's flag (nullptr without a buffer), set once its buffer has begun.
template <typename T>
inline void sgd_row(T* w, T* buf, uint8_t* started, const T* g, uint64_t n,
                    const SgdCoefficients<T>& c) {
  const bool was_started = started && __atomic_load_n(started, __ATOMIC_RELAXED) != 0;
  for (uint64_t j = 0; j < n; j += kRowChunk) {
    sgd_chunk(w + j, buf ? buf + j : nullptr, was_started, g + j,
              n - j < kRowChunk ? n - j : kRowChunk, c);
  }
  if (started && !was_started) __atomic_store_n(started, uint8_t{1}, __ATOMIC_RELAXED);
}

// Adagrad (AdagradCoefficients).
template <typename T>
inline void adagrad_chunk(T* __restrict w, T* __restrict acc, const T* __restrict g, uint64_t n,
                          const AdagradCoefficients<T>& c) {
  alignas(64) T gt[kRowChunk];
  alignas(64) T d[kRowChunk];
  const T* ge = transformed_grad(w, g, n, c.grad, gt);
  for (uint64_t j = 0; j < n; ++j) {
    const T a = adagrad_next_sum(acc[j], ge[j]);
    acc[j] = a;
    d[j] = a;
  }
  sqrt_inplace(d, n);
  for (uint64_t j = 0; j < n; ++j) w[j] += adagrad_delta(ge[j], d[j], c);
}

template <typename T>
inline void adagrad_row(T* w, T* acc, const T* g, uint64_t n, const AdagradCoefficients<T>& c) {
  for (uint64_t j = 0; j < n; j += kRowChunk) {
    adagrad_chunk(w + j, acc + j, g + j, n - j < kRowChunk ? n - j : kRowChunk, c);
  }
}

// Adam and AdamW (AdamCoefficients); vmax is amsgrad's maximum or nullptr.
template <typename T>
inline void adam_chunk(T* __restrict w, T* __restrict m, T* __restrict v, T* __restrict vmax,
                       const T* __restrict g, uint64_t n, const AdamCoefficients<T>& c) {
  alignas(64) T gt[kRowChunk];
  alignas(64) T d[kRowChunk];
  if (c.param_scale != T(1)) {
    for (uint64_t j = 0; j < n; ++j) w[j] *= c.param_scale;
  }
  const T* ge = transformed_grad(w, g, n, c.grad, gt);
  for (uint64_t j = 0; j < n; ++j) {
    m[j] = adam_next_m(m[j], ge[j], c);
    const T vj = adam_next_v(v[j], ge[j], c);
    v[j] = vj;
    d[j] = vj;
  }
  if (vmax) {
    for (uint64_t j = 0; j < n; ++j) {
      const T hi = vmax[j] > d[j] ? vmax[j] : d[j];
      vmax[j] = hi;
      d[j] = hi;
    }
  }
  sqrt_inplace(d, n);
  for (uint64_t j = 0; j < n; ++j) w[j] += adam_delta(m[j], d[j], c);
}

template <typename T>
inline void adam_row(T* w, T* m, T* v, T* vmax, const T* g, uint64_t n,
                     const AdamCoefficients<T>& c) {
  for (uint64_t j = 0; j < n; j += kRowChunk) {
    adam_chunk(w + j, m + j, v + j, vmax ? vmax + j : nullptr, g + j,
               n - j < kRowChunk ? n - j : kRowChunk, c);
  }
}

}  // namespace pscore::hogwild::PSCORE_KERNEL_ISA
