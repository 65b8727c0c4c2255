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

// What every optimizer does to the gradient first, as torch.optim: maximize flips its sign and
// L2 weight decay adds weight_decay * w. g' = sign * g + weight_decay * w.
template <typename T>
struct GradTransform {
  T sign;
  T weight_decay;
  bool identity() const { return sign == T(1) && weight_decay == T(0); }
};

// The chunk's g' in `out` (kRowChunk elements), or g itself when the transform is the identity.
template <typename T>
inline const T* transformed_grad(const T* __restrict w, const T* __restrict g, uint64_t n,
                                 GradTransform<T> t, T* __restrict out) {
  if (t.identity()) return g;
  for (uint64_t j = 0; j < n; ++j) out[j] = t.sign * g[j] + t.weight_decay * w[j];
  return out;
}

template <typename T>
struct SgdCoeffs {
  T lr;
  T momentum;
  T dampening;
  bool nesterov;
};

// SGD as torch.optim.SGD on g': without a buffer w -= lr g'; with one, the buffer starts as g'
// (no dampening) on the row's first step and becomes momentum buf + (1 - dampening) g' after;
// w -= lr (nesterov ? g' + momentum buf : buf).
template <typename T>
inline void sgd_chunk(T* __restrict w, T* __restrict buf, bool started, const T* __restrict g,
                      uint64_t n, SgdCoeffs<T> c, GradTransform<T> t) {
  alignas(64) T gt[kRowChunk];
  const T* ge = transformed_grad(w, g, n, t, gt);
  if (!buf) {
    for (uint64_t j = 0; j < n; ++j) w[j] -= c.lr * ge[j];
    return;
  }
  if (started) {
    const T keep = T(1) - c.dampening;
    for (uint64_t j = 0; j < n; ++j) buf[j] = c.momentum * buf[j] + keep * ge[j];
  } else {
    for (uint64_t j = 0; j < n; ++j) buf[j] = ge[j];
  }
  if (c.nesterov) {
    for (uint64_t j = 0; j < n; ++j) w[j] -= c.lr * (ge[j] + c.momentum * buf[j]);
  } else {
    for (uint64_t j = 0; j < n; ++j) w[j] -= c.lr * buf[j];
  }
}

// One row; `started` is the row's flag (nullptr without a buffer), set once its buffer has begun.
template <typename T>
inline void sgd_row(T* w, T* buf, uint8_t* started, const T* g, uint64_t n, SgdCoeffs<T> c,
                    GradTransform<T> t) {
  const bool was_started = started && __atomic_load_n(started, __ATOMIC_RELAXED) != 0;
  for (uint64_t j = 0; j < n; j += kRowChunk) {
    sgd_chunk(w + j, buf ? buf + j : nullptr, was_started, g + j,
              n - j < kRowChunk ? n - j : kRowChunk, c, t);
  }
  if (started && !was_started) __atomic_store_n(started, uint8_t{1}, __ATOMIC_RELAXED);
}

template <typename T>
struct AdagradCoeffs {
  T lr;  // already decayed: lr / (1 + (step - 1) * lr_decay)
  T eps;
};

// Adagrad as torch.optim.Adagrad on g': acc += g'^2; w -= lr * g' / (sqrt(acc) + eps).
template <typename T>
inline void adagrad_chunk(T* __restrict w, T* __restrict acc, const T* __restrict g, uint64_t n,
                          AdagradCoeffs<T> c, GradTransform<T> t) {
  alignas(64) T gt[kRowChunk];
  alignas(64) T d[kRowChunk];
  const T* ge = transformed_grad(w, g, n, t, gt);
  for (uint64_t j = 0; j < n; ++j) {
    const T a = acc[j] + ge[j] * ge[j];
    acc[j] = a;
    d[j] = a;
  }
  sqrt_inplace(d, n);
  for (uint64_t j = 0; j < n; ++j) w[j] -= c.lr * ge[j] / (d[j] + c.eps);
}

template <typename T>
inline void adagrad_row(T* w, T* acc, const T* g, uint64_t n, AdagradCoeffs<T> c,
                        GradTransform<T> t) {
  for (uint64_t j = 0; j < n; j += kRowChunk) {
    adagrad_chunk(w + j, acc + j, g + j, n - j < kRowChunk ? n - j : kRowChunk, c, t);
  }
}

// Adam as torch.optim.Adam on g', with the bias corrections of step t folded in:
// m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2; with amsgrad vmax = max(vmax, v) takes v's place
// below; w -= step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps), where step_size = lr / (1 - b1^t)
// and inv_sqrt_bc2 = 1 / sqrt(1 - b2^t). AdamW first scales w by param_scale = 1 - lr * decay.
template <typename T>
struct AdamCoeffs {
  T beta1;
  T beta2;
  T step_size;
  T inv_sqrt_bc2;
  T eps;
  T param_scale;
};

template <typename T>
inline void adam_chunk(T* __restrict w, T* __restrict m, T* __restrict v, T* __restrict vmax,
                       const T* __restrict g, uint64_t n, AdamCoeffs<T> c, GradTransform<T> t) {
  alignas(64) T gt[kRowChunk];
  alignas(64) T d[kRowChunk];
  const T* ge = transformed_grad(w, g, n, t, gt);
  const T one_b1 = T(1) - c.beta1;
  const T one_b2 = T(1) - c.beta2;
  if (c.param_scale != T(1)) {
    for (uint64_t j = 0; j < n; ++j) w[j] *= c.param_scale;
  }
  for (uint64_t j = 0; j < n; ++j) {
    m[j] = c.beta1 * m[j] + one_b1 * ge[j];
    const T vj = c.beta2 * v[j] + one_b2 * ge[j] * ge[j];
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
  for (uint64_t j = 0; j < n; ++j) w[j] -= c.step_size * m[j] / (d[j] * c.inv_sqrt_bc2 + c.eps);
}

template <typename T>
inline void adam_row(T* w, T* m, T* v, T* vmax, const T* g, uint64_t n, AdamCoeffs<T> c,
                     GradTransform<T> t) {
  for (uint64_t j = 0; j < n; j += kRowChunk) {
    adam_chunk(w + j, m + j, v + j, vmax ? vmax + j : nullptr, g + j,
               n - j < kRowChunk ? n - j : kRowChunk, c, t);
  }
}

}  // namespace pscore::hogwild::PSCORE_KERNEL_ISA
