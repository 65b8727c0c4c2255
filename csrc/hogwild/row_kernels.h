// The per-row update arithmetic of each optimizer: one pass over a row (in chunks that stay in
// L1), written as plain loops over __restrict pointers so -O3 vectorises them; square roots go
// through sqrt_inplace. Part of the kernel bodies: include only from kernel_bodies.h.
#pragma once

#include <cstdint>

#include "hogwild/vector_sqrt.h"

namespace pscore::hogwild::PSCORE_KERNEL_ISA {

// Elements handled per chunk: the chunk's temporaries live on the stack, in L1.
constexpr uint64_t kRowChunk = 256;

// w += alpha * x (SGD is alpha = -lr).
template <typename T>
inline void axpy_row(T* __restrict w, const T* __restrict x, uint64_t n, T alpha) {
  for (uint64_t j = 0; j < n; ++j) w[j] += alpha * x[j];
}

template <typename T>
struct AdagradCoeffs {
  T lr;
  T eps;
};

// Adagrad as torch.optim.Adagrad: acc += g^2; w -= lr * g / (sqrt(acc) + eps).
template <typename T>
inline void adagrad_chunk(T* __restrict w, T* __restrict acc, const T* __restrict g, uint64_t n,
                          AdagradCoeffs<T> c) {
  alignas(64) T d[kRowChunk];
  for (uint64_t j = 0; j < n; ++j) {
    const T a = acc[j] + g[j] * g[j];
    acc[j] = a;
    d[j] = a;
  }
  sqrt_inplace(d, n);
  for (uint64_t j = 0; j < n; ++j) w[j] -= c.lr * g[j] / (d[j] + c.eps);
}

template <typename T>
inline void adagrad_row(T* w, T* acc, const T* g, uint64_t n, AdagradCoeffs<T> c) {
  for (uint64_t j = 0; j < n; j += kRowChunk) {
    adagrad_chunk(w + j, acc + j, g + j, n - j < kRowChunk ? n - j : kRowChunk, c);
  }
}

// Adam as torch.optim.Adam (no weight decay), with the bias corrections of step t folded in:
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
// where step_size = lr / (1 - b1^t) and inv_sqrt_bc2 = 1 / sqrt(1 - b2^t).
template <typename T>
struct AdamCoeffs {
  T beta1;
  T beta2;
  T step_size;
  T inv_sqrt_bc2;
  T eps;
};

template <typename T>
inline void adam_chunk(T* __restrict w, T* __restrict m, T* __restrict v, const T* __restrict g,
                       uint64_t n, AdamCoeffs<T> c) {
  alignas(64) T d[kRowChunk];
  const T one_b1 = T(1) - c.beta1;
  const T one_b2 = T(1) - c.beta2;
  for (uint64_t j = 0; j < n; ++j) {
    m[j] = c.beta1 * m[j] + one_b1 * g[j];
    const T vj = c.beta2 * v[j] + one_b2 * g[j] * g[j];
    v[j] = vj;
    d[j] = vj;
  }
  sqrt_inplace(d, n);
  for (uint64_t j = 0; j < n; ++j) w[j] -= c.step_size * m[j] / (d[j] * c.inv_sqrt_bc2 + c.eps);
}

template <typename T>
inline void adam_row(T* w, T* m, T* v, const T* g, uint64_t n, AdamCoeffs<T> c) {
  for (uint64_t j = 0; j < n; j += kRowChunk) {
    adam_chunk(w + j, m + j, v + j, g + j, n - j < kRowChunk ? n - j : kRowChunk, c);
  }
}

}  // namespace pscore::hogwild::PSCORE_KERNEL_ISA
