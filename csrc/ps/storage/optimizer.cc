#include "ps/storage/optimizer.h"

#include <algorithm>
#include <cmath>

#include "common/optimizer_formulas.h"

namespace pscore::ps {
namespace {

// Each loop steps n elements with the per-element formulas of common/optimizer_formulas.h.
void sgd(const SgdCoefficients<float> c, float* __restrict p, const float* __restrict g,
         float* __restrict buf, int64_t n, int64_t step) {
  if (c.momentum == 0.0f && c.grad.identity()) {
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] + sgd_delta(g[i], c);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float d = c.grad.apply(g[i], p[i]);
    if (c.momentum != 0.0f) {
      buf[i] = step == 1 ? d : sgd_next_buffer(buf[i], d, c);
      d = sgd_direction(d, buf[i], c);
    }
    p[i] = p[i] + sgd_delta(d, c);
  }
}

void adagrad(const AdagradCoefficients<float> c, float* __restrict p, const float* __restrict g,
             float* __restrict sum, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float d = c.grad.apply(g[i], p[i]);
    sum[i] = adagrad_next_sum(sum[i], d);
    p[i] = p[i] + adagrad_delta(d, std::sqrt(sum[i]), c);
  }
}

void adam(const AdamCoefficients<float> c, float* __restrict p, const float* __restrict g,
          float* __restrict m, float* __restrict v, float* __restrict vmax, int64_t n) {
  const bool scale = c.param_scale != 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (scale) p[i] = p[i] * c.param_scale;
    const float d = c.grad.apply(g[i], p[i]);
    m[i] = adam_next_m(m[i], d, c);
    v[i] = adam_next_v(v[i], d, c);
    float second = v[i];
    if (vmax) {
      vmax[i] = std::max(vmax[i], v[i]);
      second = vmax[i];
    }
    p[i] = p[i] + adam_delta(m[i], std::sqrt(second), c);
  }
}

void rmsprop(const RmspropCoefficients<float> c, float* __restrict p, const float* __restrict g,
             float* __restrict state, int64_t n, int64_t stride) {
  float* __restrict sq = state;
  float* __restrict avg = c.centered ? state + stride : nullptr;
  float* __restrict buf = c.momentum != 0.0f ? state + (c.centered ? 2 : 1) * stride : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    rmsprop_element(p[i], sq[i], avg ? avg + i : nullptr, buf ? buf + i : nullptr, g[i], c);
  }
}

template <typename C>
auto in_float(const C& c) {
  return c.template as<float>();
}

}  // namespace

void apply_optimizer(const OptimizerSpec& s, float* param, const float* grad, float* state,
                     int64_t n, int64_t step, int64_t slot_stride) {
  const int64_t stride = slot_stride < 0 ? n : slot_stride;
  const GradTransform<double> l2 = grad_transform(false, s.weight_decay);
  const auto t = static_cast<uint64_t>(step);
  switch (s.kind) {
    case OptimizerKind::kSgd:
      return sgd(in_float(sgd_coefficients(s.lr, s.momentum, s.dampening, s.nesterov, l2)), param,
                 grad, state, n, step);
    case OptimizerKind::kAdagrad:
      return adagrad(in_float(adagrad_coefficients(s.lr, s.lr_decay, s.eps, t, l2)), param, grad,
                     state, n);
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: {
      const bool decoupled = s.kind == OptimizerKind::kAdamW;
      const auto c =
          adam_coefficients(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, decoupled, false, t);
      return adam(in_float(c), param, grad, state, state + stride,
                  s.amsgrad ? state + 2 * stride : nullptr, n);
    }
    case OptimizerKind::kRmsprop:
      return rmsprop(in_float(rmsprop_coefficients(s.lr, s.alpha, s.eps, s.momentum, s.centered,
                                                   s.weight_decay)),
                     param, grad, state, n, stride);
  }
}

void init_optimizer_state(const OptimizerSpec& spec, float* state, int64_t n) {
  int64_t total = static_cast<int64_t>(spec.num_slots()) * n;
  float fill = spec.kind == OptimizerKind::kAdagrad
                   ? static_cast<float>(spec.initial_accumulator_value)
                   : 0.0f;
  std::fill(state, state + total, 0.0f);
  if (spec.kind == OptimizerKind::kAdagrad) std::fill(state, state + n, fill);
}

void clip_gradient_values(const OptimizerSpec& spec, float* g, int64_t n) {
  if (spec.clip_value <= 0) return;
  const float v = static_cast<float>(spec.clip_value);
  for (int64_t i = 0; i < n; ++i) g[i] = std::min(std::max(g[i], -v), v);
}

float clip_norm_factor(const OptimizerSpec& spec, double grad_norm) {
  if (spec.clip_norm <= 0) return 1.0f;
  float coef = static_cast<float>(spec.clip_norm) / (static_cast<float>(grad_norm) + 1e-6f);
  return std::min(coef, 1.0f);
}

double sum_of_squares(const float* g, int64_t n) {
  double acc[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) acc[k] += static_cast<double>(g[i + k]) * g[i + k];
  for (; i < n; ++i) acc[0] += static_cast<double>(g[i]) * g[i];
  return acc[0] + acc[1] + acc[2] + acc[3];
}

void scale_in_place(float* __restrict g, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) g[i] *= factor;
}

void add_in_place(float* __restrict acc, const float* __restrict g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += g[i];
}

}  // namespace pscore::ps
