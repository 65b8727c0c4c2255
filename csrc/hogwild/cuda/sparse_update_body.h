// The arithmetic of the GPU sparse updates, written once for the CUDA kernels and for a host
// build, so the tests check it against the CPU kernels on machines without a GPU. A group of
// `width` lanes (a warp, or part of one for narrow rows) handles one batch entry: lane l takes
// columns l, l + width, ..., so neighbouring lanes touch neighbouring floats and accesses
// coalesce. `add(p, v)` bumps a shared float and returns its old value: atomicAdd on the device,
// so rows repeated in a batch combine as Hogwild's unlocked writes do.
#pragma once

#include <math.h>

#include <cstdint>

#include "hogwild/cuda/cuda_updates.h"

#if defined(__CUDACC__)
#define PSCORE_HOST_DEVICE __host__ __device__
#else
#define PSCORE_HOST_DEVICE
#endif

namespace pscore::hogwild::cuda {

// One call's constant factors, in float. Adam's bias corrections for its step are folded in:
// w -= step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps), as the CPU kernels do.
struct Coeffs {
  float lr = 0, eps = 0, beta1 = 0, beta2 = 0, step_size = 0, inv_sqrt_bc2 = 0;
};

// Checks SparseUpdate::coeffs for the update's kind and converts them; throws
// std::invalid_argument on a wrong count or an Adam step below 1.
Coeffs coeffs_of(const SparseUpdate& u);

// The table and its optimizer state, all rows x dim float32 in device memory.
struct DeviceTable {
  float* w;
  float* s0;  // Adagrad's accumulator, Adam's first moment
  float* s1;  // Adam's second moment
  uint64_t rows;
  uint64_t dim;
};

template <typename Id>
PSCORE_HOST_DEVICE inline bool id_out_of_range(Id id, uint64_t rows) {
  return id < 0 || static_cast<uint64_t>(id) >= rows;
}

// Element k of the table takes gradient g.
template <UpdateKind K, class Add>
PSCORE_HOST_DEVICE inline void update_element(const DeviceTable& t, uint64_t k, float g,
                                              const Coeffs& c, Add add) {
  if constexpr (K == UpdateKind::kSgd) {
    add(t.w + k, -c.lr * g);
  } else if constexpr (K == UpdateKind::kAdagrad) {
    const float acc = add(t.s0 + k, g * g) + g * g;
    add(t.w + k, -c.lr * g / (sqrtf(acc) + c.eps));
  } else {
    // m = b1 m + (1-b1) g as the delta (1-b1)(g - m), so colliding updates sum atomically.
    const float dm = (1.f - c.beta1) * (g - t.s0[k]);
    const float m = add(t.s0 + k, dm) + dm;
    const float dv = (1.f - c.beta2) * (g * g - t.s1[k]);
    const float v = add(t.s1 + k, dv) + dv;
    add(t.w + k, -c.step_size * m / (sqrtf(v) * c.inv_sqrt_bc2 + c.eps));
  }
}

// Lane `lane` of a `width`-lane group applies its columns of batch entry i.
template <UpdateKind K, class Add, typename Id>
PSCORE_HOST_DEVICE inline void update_entry(const DeviceTable& t, const Id* ids, const float* grads,
                                            uint64_t i, unsigned lane, unsigned width,
                                            const Coeffs& c, Add add) {
  const uint64_t row = static_cast<uint64_t>(ids[i]) * t.dim;
  const float* g = grads + i * t.dim;
  for (uint64_t j = lane; j < t.dim; j += width) update_element<K>(t, row + j, g[j], c, add);
}

// Lanes per batch entry: a whole warp for rows of 32 floats or more, else the smallest power of
// two that covers a row, so narrow rows do not leave most of a warp idle.
inline unsigned lanes_per_entry(uint64_t dim) {
  unsigned width = 1;
  while (width < 32 && width < dim) width *= 2;
  return width;
}

}  // namespace pscore::hogwild::cuda
