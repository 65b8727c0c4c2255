#include "ps/optimizer.h"

#include <algorithm>
#include <cmath>

namespace pscore::ps {
namespace {

// torch's CPU lerp: self + w * (end - self) for |w| < 0.5, else end - (end - self) * (1 - w).
inline float lerp(float self, float end, float w) {
  return std::abs(w) < 0.5f ? self + w * (end - self) : end - (end - self) * (1.0f - w);
}

void sgd(const OptimizerSpec& s, float* __restrict p, const float* __restrict g,
         float* __restrict buf, int64_t n, int64_t step) {
  const float lr = static_cast<float>(s.lr), wd = static_cast<float>(s.weight_decay);
  const float mom = static_cast<float>(s.momentum);
  const float keep = static_cast<float>(1.0 - s.dampening);
  if (mom == 0.0f && wd == 0.0f) {
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] + (-lr) * g[i];
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float d = wd != 0.0f ? g[i] + wd * p[i] : g[i];
    if (mom != 0.0f) {
      buf[i] = step == 1 ? d : buf[i] * mom + keep * d;
      d = s.nesterov ? d + mom * buf[i] : buf[i];
    }
    p[i] = p[i] + (-lr) * d;
  }
}

void adagrad(const OptimizerSpec& s, float* __restrict p, const float* __restrict g,
             float* __restrict sum, int64_t n, int64_t step) {
  const float wd = static_cast<float>(s.weight_decay), eps = static_cast<float>(s.eps);
  const float clr = static_cast<float>(s.lr / (1.0 + static_cast<double>(step - 1) * s.lr_decay));
  for (int64_t i = 0; i < n; ++i) {
    float d = wd != 0.0f ? g[i] + wd * p[i] : g[i];
    sum[i] = sum[i] + d * d;
    float std = std::sqrt(sum[i]) + eps;
    p[i] = p[i] + (-clr) * d / std;
  }
}

void adam(const OptimizerSpec& s, bool decoupled, float* __restrict p, const float* __restrict g,
          float* __restrict state, int64_t n, int64_t step, int64_t stride) {
  float* __restrict m = state;
  float* __restrict v = state + stride;
  float* __restrict vmax = s.amsgrad ? state + 2 * stride : nullptr;
  const float b1w = static_cast<float>(1.0 - s.beta1), b2 = static_cast<float>(s.beta2);
  const float b2w = static_cast<float>(1.0 - s.beta2), eps = static_cast<float>(s.eps);
  const float wd = decoupled ? 0.0f : static_cast<float>(s.weight_decay);
  const float decay = static_cast<float>(1.0 - s.lr * s.weight_decay);
  const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(step));
  const float step_size = static_cast<float>(s.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  for (int64_t i = 0; i < n; ++i) {
    if (decoupled) p[i] = p[i] * decay;
    float d = wd != 0.0f ? g[i] + wd * p[i] : g[i];
    m[i] = lerp(m[i], d, b1w);
    v[i] = v[i] * b2 + b2w * d * d;
    float second = v[i];
    if (vmax) {
      vmax[i] = std::max(vmax[i], v[i]);
      second = vmax[i];
    }
    float denom = std::sqrt(second) / bc2_sqrt + eps;
    p[i] = p[i] + (-step_size) * m[i] / denom;
  }
}

void rmsprop(const OptimizerSpec& s, float* __restrict p, const float* __restrict g,
             float* __restrict state, int64_t n, int64_t stride) {
  float* __restrict sq = state;
  float* __restrict gavg = s.centered ? state + stride : nullptr;
  float* __restrict buf = s.momentum != 0 ? state + (s.centered ? 2 : 1) * stride : nullptr;
  const float alpha = static_cast<float>(s.alpha), aw = static_cast<float>(1.0 - s.alpha);
  const float wd = static_cast<float>(s.weight_decay), eps = static_cast<float>(s.eps);
  const float lr = static_cast<float>(s.lr), mom = static_cast<float>(s.momentum);
  for (int64_t i = 0; i < n; ++i) {
    float d = wd != 0.0f ? g[i] + wd * p[i] : g[i];
    sq[i] = sq[i] * alpha + aw * d * d;
    float avg;
    if (gavg) {
      gavg[i] = lerp(gavg[i], d, aw);
      avg = std::sqrt(sq[i] + (-1.0f) * gavg[i] * gavg[i]);
    } else {
      avg = std::sqrt(sq[i]);
    }
    avg = avg + eps;
    if (buf) {
      buf[i] = buf[i] * mom + d / avg;
      p[i] = p[i] + (-lr) * buf[i];
    } else {
      p[i] = p[i] + (-lr) * d / avg;
    }
  }
}

}  // namespace

void apply_optimizer(const OptimizerSpec& spec, float* param, const float* grad, float* state,
                     int64_t n, int64_t step, int64_t slot_stride) {
  const int64_t stride = slot_stride < 0 ? n : slot_stride;
  switch (spec.kind) {
    case OptimizerKind::kSgd:
      return sgd(spec, param, grad, state, n, step);
    case OptimizerKind::kAdagrad:
      return adagrad(spec, param, grad, state, n, step);
    case OptimizerKind::kAdam:
      return adam(spec, false, param, grad, state, n, step, stride);
    case OptimizerKind::kAdamW:
      return adam(spec, true, param, grad, state, n, step, stride);
    case OptimizerKind::kRmsprop:
      return rmsprop(spec, param, grad, state, n, stride);
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
