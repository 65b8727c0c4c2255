// The arithmetic of the GPU sparse updates, written once for the CUDA kernels and for a host
// build, so the tests check it against the CPU kernels on machines without a GPU. A group of
// `width` lanes (a warp, or part of one for narrow rows) handles one batch entry, V floats at a
// time: lane l takes floats [lV, lV + V), then V * width further on, ..., so neighbouring lanes
// touch neighbouring memory and accesses coalesce. `add(p, v)` bumps V shared floats and returns
// their old values: atomicAdd on the device (one vector atomic for V = 4 on sm_90), so rows
// repeated in a batch combine as Hogwild's unlocked writes do.
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

// V neighbouring floats, loaded and added as one (V = 4: 16-byte loads and vector atomics).
template <unsigned V>
struct alignas(sizeof(float) * V) Floats {
  float f[V];
};

// V elements from k on take gradients g: the formulas of common/optimizer_formulas.h, with every
// state change made through `add` (Adam's moments as increments).
template <OptimizerKind K, unsigned V, class Add>
PSCORE_HOST_DEVICE inline void update_elements(const DeviceTable& t, uint64_t k, const Floats<V>& g,
                                               const SparseCoefficients& c, Add add) {
  using F = Floats<V>;
  F* w = reinterpret_cast<F*>(t.w + k);
  F delta;
  if constexpr (K == OptimizerKind::kSgd) {
    for (unsigned e = 0; e < V; ++e) delta.f[e] = sgd_delta(g.f[e], c.sgd);
  } else if constexpr (K == OptimizerKind::kAdagrad) {
    F squares;
    for (unsigned e = 0; e < V; ++e) squares.f[e] = g.f[e] * g.f[e];
    const F before = add(reinterpret_cast<F*>(t.s0 + k), squares);
    for (unsigned e = 0; e < V; ++e) {
      const float sum = adagrad_next_sum(before.f[e], g.f[e]);
      delta.f[e] = adagrad_delta(g.f[e], formulas::square_root(sum), c.adagrad);
    }
  } else {
    F* m = reinterpret_cast<F*>(t.s0 + k);
    F* v = reinterpret_cast<F*>(t.s1 + k);
    F dm, dv;
    const F m_seen = *m, v_seen = *v;
    for (unsigned e = 0; e < V; ++e) {
      dm.f[e] = adam_m_increment(m_seen.f[e], g.f[e], c.adam);
      dv.f[e] = adam_v_increment(v_seen.f[e], g.f[e], c.adam);
    }
    const F m_before = add(m, dm), v_before = add(v, dv);
    for (unsigned e = 0; e < V; ++e) {
      const float m_now = m_before.f[e] + dm.f[e], v_now = v_before.f[e] + dv.f[e];
      delta.f[e] = adam_delta(m_now, formulas::square_root(v_now), c.adam);
    }
  }
  add(w, delta);
}

// Lane `lane` of a `width`-lane group applies its columns of batch entry i, V floats at a time
// (V > 1 needs dim % V == 0 and every array aligned to V floats: vector_width() says).
template <OptimizerKind K, unsigned V, class Add, typename Id>
PSCORE_HOST_DEVICE inline void update_entry(const DeviceTable& t, const Id* ids, const float* grads,
                                            uint64_t i, unsigned lane, unsigned width,
                                            const SparseCoefficients& c, Add add) {
  const uint64_t row = static_cast<uint64_t>(ids[i]) * t.dim;
  const float* g = grads + i * t.dim;
  for (uint64_t j = uint64_t{lane} * V; j < t.dim; j += uint64_t{width} * V) {
    update_elements<K, V>(t, row + j, *reinterpret_cast<const Floats<V>*>(g + j), c, add);
  }
}

// The host instantiation's `add`: a plain read-modify-write, for running the body serially.
struct SerialAdd {
  template <unsigned V>
  Floats<V> operator()(Floats<V>* p, const Floats<V>& v) const {
    const Floats<V> old = *p;
    for (unsigned e = 0; e < V; ++e) p->f[e] += v.f[e];
    return old;
  }
};

// Floats per load and atomic: 4 when every row starts on a 16-byte boundary (dim a multiple of
// 4, every array 16-byte aligned), else 1.
inline unsigned vector_width(const DeviceTable& t, const float* grads) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool all_aligned =
      aligned(t.w) && aligned(grads) && (!t.s0 || aligned(t.s0)) && (!t.s1 || aligned(t.s1));
  return t.dim % 4 == 0 && all_aligned ? 4 : 1;
}

// Lanes per batch entry for rows of `units` loads: a whole warp for 32 or more, else the
// smallest power of two that covers a row, so narrow rows do not leave most of a warp idle.
inline unsigned lanes_per_entry(uint64_t units) {
  unsigned width = 1;
  while (width < 32 && width < units) width *= 2;
  return width;
}

}  // namespace pscore::hogwild::cuda
