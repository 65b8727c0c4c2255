// The arithmetic of the GPU sparse updates, written once for the CUDA kernels and for a host
// build, so the tests check it against the CPU kernels on machines without a GPU. A group of
// `width` lanes (a warp, or part of one for narrow rows) handles one batch entry: lane l takes
// columns l, l + width, ..., so neighbouring lanes touch neighbouring floats and accesses
// coalesce. `add(p, v)` bumps a shared float and returns its old value: atomicAdd on the device,
// so rows repeated in a batch combine as Hogwild's unlocked writes do.
#pragma once

#include <math.h>

#include <cstdint>

#include "common/optimizer_formulas.h"
#include "hogwild/cuda/cuda_updates.h"

namespace pscore::hogwild::cuda {

// One call's coefficients in float (common/optimizer_formulas.h); only the kind's struct is set.
struct SparseCoefficients {
  SgdCoefficients<float> sgd;
  AdagradCoefficients<float> adagrad;
  AdamCoefficients<float> adam;
};

// Checks the options of the update's kind and folds them into coefficients; throws
// std::invalid_argument on an option out of torch's range or one the GPU kernels do not take, a
// kind without GPU kernel or an Adam step below 1.
SparseCoefficients coefficients_of(const SparseUpdate& u);

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

// Element k of the table takes gradient g: the formulas of common/optimizer_formulas.h, with
// every state change made through `add` (Adam's moments as increments).
template <OptimizerKind K, class Add>
PSCORE_HOST_DEVICE inline void update_element(const DeviceTable& t, uint64_t k, float g,
                                              const SparseCoefficients& c, Add add) {
  if constexpr (K == OptimizerKind::kSgd) {
    add(t.w + k, sgd_delta(g, c.sgd));
  } else if constexpr (K == OptimizerKind::kAdagrad) {
    const float sum = adagrad_next_sum(add(t.s0 + k, g * g), g);
    add(t.w + k, adagrad_delta(g, formulas::square_root(sum), c.adagrad));
  } else {
    const float dm = adam_m_increment(t.s0[k], g, c.adam);
    const float m = add(t.s0 + k, dm) + dm;
    const float dv = adam_v_increment(t.s1[k], g, c.adam);
    const float v = add(t.s1 + k, dv) + dv;
    add(t.w + k, adam_delta(m, formulas::square_root(v), c.adam));
  }
}

// Lane `lane` of a `width`-lane group applies its columns of batch entry i.
template <OptimizerKind K, class Add, typename Id>
PSCORE_HOST_DEVICE inline void update_entry(const DeviceTable& t, const Id* ids, const float* grads,
                                            uint64_t i, unsigned lane, unsigned width,
                                            const SparseCoefficients& c, Add add) {
  const uint64_t row = static_cast<uint64_t>(ids[i]) * t.dim;
  const float* g = grads + i * t.dim;
  for (uint64_t j = lane; j < t.dim; j += width) update_element<K>(t, row + j, g[j], c, add);
}

// The host instantiation's `add`: a plain read-modify-write, for running the body serially.
struct SerialAdd {
  float operator()(float* p, float v) const {
    const float old = *p;
    *p = old + v;
    return old;
  }
};

// Lanes per batch entry: a whole warp for rows of 32 floats or more, else the smallest power of
// two that covers a row, so narrow rows do not leave most of a warp idle.
inline unsigned lanes_per_entry(uint64_t dim) {
  unsigned width = 1;
  while (width < 32 && width < dim) width *= 2;
  return width;
}

}  // namespace pscore::hogwild::cuda
