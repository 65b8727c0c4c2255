// torch.optim's update rules, written once for the parameter server, the Hogwild CPU kernels and
// the CUDA sparse updates: one enum naming the optimizers, one coefficient struct per optimizer
// (built by one function each, so Adam's bias corrections and Adagrad's lr decay are computed in
// one place) and the per-element arithmetic, callable from host and device code.
//
// Each element function does torch's single-tensor CPU arithmetic in the element type T, in
// torch's order of operations, so a float step matches torch.optim to the last bit or two.
#pragma once

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define PSCORE_HOST_DEVICE __host__ __device__
#else
#define PSCORE_HOST_DEVICE
#endif

namespace pscore {

// The optimizers, numbered as the parameter server's wire and Python's cuda kinds number them.
// Hogwild tables step with kSgd, kAdagrad and kAdam (AdamW is kAdam with decoupled decay).
enum class OptimizerKind : uint8_t { kSgd = 0, kAdagrad = 1, kAdam = 2, kAdamW = 3, kRmsprop = 4 };

namespace formulas {

PSCORE_HOST_DEVICE inline float square_root(float x) { return sqrtf(x); }
PSCORE_HOST_DEVICE inline double square_root(double x) { return sqrt(x); }
PSCORE_HOST_DEVICE inline float absolute(float x) { return fabsf(x); }
PSCORE_HOST_DEVICE inline double absolute(double x) { return fabs(x); }

// torch's CPU lerp: self + w (end - self) for |w| < 0.5, else end - (end - self)(1 - w).
template <typename T>
PSCORE_HOST_DEVICE inline T lerp(T self, T end, T w) {
  return absolute(w) < T(0.5) ? self + w * (end - self) : end - (end - self) * (T(1) - w);
}

}  // namespace formulas

// What every optimizer does to the gradient first: maximize flips its sign and L2 weight decay
// adds weight_decay * w. g' = sign * g + weight_decay * w.
template <typename T>
struct GradTransform {
  T sign = T(1);
  T weight_decay = T(0);

  PSCORE_HOST_DEVICE bool identity() const { return sign == T(1) && weight_decay == T(0); }
  PSCORE_HOST_DEVICE T apply(T g, T w) const {
    return weight_decay == T(0) ? sign * g : sign * g + weight_decay * w;
  }
  template <typename U>
  GradTransform<U> as() const {
    return GradTransform<U>{static_cast<U>(sign), static_cast<U>(weight_decay)};
  }
};

// SGD: buf = g' on a row's first step, then momentum buf + (1 - dampening) g';
// w += -lr (nesterov ? g' + momentum buf : buf), or w += -lr g' without momentum.
template <typename T>
struct SgdCoefficients {
  T lr = T(0);
  T momentum = T(0);
  T keep = T(1);  // 1 - dampening
  bool nesterov = false;
  GradTransform<T> grad;

  template <typename U>
  SgdCoefficients<U> as() const {
    return SgdCoefficients<U>{static_cast<U>(lr), static_cast<U>(momentum), static_cast<U>(keep),
                              nesterov, grad.template as<U>()};
  }
};

// Adagrad: sum += g'^2; w += -lr_t g' / (sqrt(sum) + eps) with lr_t = lr / (1 + (t - 1) lr_decay).
template <typename T>
struct AdagradCoefficients {
  T lr = T(0);  // already decayed for the step
  T eps = T(0);
  GradTransform<T> grad;

  template <typename U>
  AdagradCoefficients<U> as() const {
    return AdagradCoefficients<U>{static_cast<U>(lr), static_cast<U>(eps), grad.template as<U>()};
  }
};

// Adam at step t: m = lerp(m, g', 1 - b1); v = b2 v + (1 - b2) g'^2 (amsgrad: vmax = max(vmax, v)
// takes v's place below); w += -step_size m / (sqrt(v) / bias_correction2_sqrt + eps), where
// step_size = lr / (1 - b1^t) and bias_correction2_sqrt = sqrt(1 - b2^t). AdamW first scales w by
// param_scale = 1 - lr weight_decay (and its grad transform has no weight decay).
template <typename T>
struct AdamCoefficients {
  T beta1 = T(0);
  T beta2 = T(0);
  T one_minus_beta1 = T(1);
  T one_minus_beta2 = T(1);
  T step_size = T(0);
  T bias_correction2_sqrt = T(1);
  T eps = T(0);
  T param_scale = T(1);
  GradTransform<T> grad;

  template <typename U>
  AdamCoefficients<U> as() const {
    return AdamCoefficients<U>{static_cast<U>(beta1),
                               static_cast<U>(beta2),
                               static_cast<U>(one_minus_beta1),
                               static_cast<U>(one_minus_beta2),
                               static_cast<U>(step_size),
                               static_cast<U>(bias_correction2_sqrt),
                               static_cast<U>(eps),
                               static_cast<U>(param_scale),
                               grad.template as<U>()};
  }
};

// RMSprop: sq = alpha sq + (1 - alpha) g'^2; centered: avg = lerp(avg, g', 1 - alpha) and
// denom = sqrt(sq - avg^2) + eps, else sqrt(sq) + eps; momentum: buf = momentum buf + g' / denom,
// w += -lr buf; else w += -lr g' / denom.
template <typename T>
struct RmspropCoefficients {
  T lr = T(0);
  T alpha = T(0);
  T one_minus_alpha = T(1);
  T eps = T(0);
  T momentum = T(0);
  bool centered = false;
  GradTransform<T> grad;

  template <typename U>
  RmspropCoefficients<U> as() const {
    return RmspropCoefficients<U>{
        static_cast<U>(lr),   static_cast<U>(alpha),    static_cast<U>(one_minus_alpha),
        static_cast<U>(eps),  static_cast<U>(momentum), centered,
        grad.template as<U>()};
  }
};

// The coefficient structs from torch's hyperparameters, in double; `step` counts updates
// including this one (>= 1).
inline GradTransform<double> grad_transform(bool maximize, double weight_decay) {
  return GradTransform<double>{maximize ? -1.0 : 1.0, weight_decay};
}

inline SgdCoefficients<double> sgd_coefficients(double lr, double momentum, double dampening,
                                                bool nesterov, GradTransform<double> grad) {
  return SgdCoefficients<double>{lr, momentum, 1.0 - dampening, nesterov, grad};
}

inline AdagradCoefficients<double> adagrad_coefficients(double lr, double lr_decay, double eps,
                                                        uint64_t step, GradTransform<double> grad) {
  return AdagradCoefficients<double>{lr / (1.0 + static_cast<double>(step - 1) * lr_decay), eps,
                                     grad};
}

// The one place Adam's bias corrections are computed. decoupled: AdamW's weight decay (scales w)
// instead of L2 decay (added to the gradient).
inline AdamCoefficients<double> adam_coefficients(double lr, double beta1, double beta2, double eps,
                                                  double weight_decay, bool decoupled,
                                                  bool maximize, uint64_t step) {
  const double t = static_cast<double>(step);
  AdamCoefficients<double> c;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.one_minus_beta1 = 1.0 - beta1;
  c.one_minus_beta2 = 1.0 - beta2;
  c.step_size = lr / (1.0 - pow(beta1, t));
  c.bias_correction2_sqrt = sqrt(1.0 - pow(beta2, t));
  c.eps = eps;
  c.param_scale = decoupled ? 1.0 - lr * weight_decay : 1.0;
  c.grad = grad_transform(maximize, decoupled ? 0.0 : weight_decay);
  return c;
}

inline RmspropCoefficients<double> rmsprop_coefficients(double lr, double alpha, double eps,
                                                        double momentum, bool centered,
                                                        double weight_decay) {
  return RmspropCoefficients<double>{
      lr, alpha, 1.0 - alpha, eps, momentum, centered, grad_transform(false, weight_decay)};
}

// ---- Per-element arithmetic; d is the transformed gradient g'. ----

template <typename T>
PSCORE_HOST_DEVICE inline T sgd_next_buffer(T buf, T d, const SgdCoefficients<T>& c) {
  return buf * c.momentum + c.keep * d;
}

// The direction SGD steps along once its buffer holds this step's value.
template <typename T>
PSCORE_HOST_DEVICE inline T sgd_direction(T d, T buf, const SgdCoefficients<T>& c) {
  return c.nesterov ? d + c.momentum * buf : buf;
}

// w's increment for direction d (d itself without momentum).
template <typename T>
PSCORE_HOST_DEVICE inline T sgd_delta(T direction, const SgdCoefficients<T>& c) {
  return (-c.lr) * direction;
}

template <typename T>
PSCORE_HOST_DEVICE inline T adagrad_next_sum(T sum, T d) {
  return sum + d * d;
}

// w's increment given sqrt of the updated sum.
template <typename T>
PSCORE_HOST_DEVICE inline T adagrad_delta(T d, T sqrt_sum, const AdagradCoefficients<T>& c) {
  return (-c.lr) * d / (sqrt_sum + c.eps);
}

template <typename T>
PSCORE_HOST_DEVICE inline T adam_next_m(T m, T d, const AdamCoefficients<T>& c) {
  return formulas::lerp(m, d, c.one_minus_beta1);
}

template <typename T>
PSCORE_HOST_DEVICE inline T adam_next_v(T v, T d, const AdamCoefficients<T>& c) {
  return v * c.beta2 + c.one_minus_beta2 * d * d;
}

// The same moment updates as increments, m += dm and v += dv, for updates that combine colliding
// rows with atomic adds (the CUDA kernels).
template <typename T>
PSCORE_HOST_DEVICE inline T adam_m_increment(T m, T d, const AdamCoefficients<T>& c) {
  return c.one_minus_beta1 * (d - m);
}

template <typename T>
PSCORE_HOST_DEVICE inline T adam_v_increment(T v, T d, const AdamCoefficients<T>& c) {
  return c.one_minus_beta2 * (d * d - v);
}

// w's increment given the updated m and sqrt of the updated v (or of amsgrad's vmax).
template <typename T>
PSCORE_HOST_DEVICE inline T adam_delta(T m, T sqrt_v, const AdamCoefficients<T>& c) {
  return (-c.step_size) * m / (sqrt_v / c.bias_correction2_sqrt + c.eps);
}

// One RMSprop element: sq, and avg (centered) and buf (momentum) when not null.
template <typename T>
PSCORE_HOST_DEVICE inline void rmsprop_element(T& w, T& sq, T* avg, T* buf, T g,
                                               const RmspropCoefficients<T>& c) {
  const T d = c.grad.apply(g, w);
  sq = sq * c.alpha + c.one_minus_alpha * d * d;
  T denom;
  if (avg) {
    *avg = formulas::lerp(*avg, d, c.one_minus_alpha);
    denom = formulas::square_root(sq + T(-1) * *avg * *avg);
  } else {
    denom = formulas::square_root(sq);
  }
  denom = denom + c.eps;
  if (buf) {
    *buf = *buf * c.momentum + d / denom;
    w = w + (-c.lr) * *buf;
  } else {
    w = w + (-c.lr) * d / denom;
  }
}

}  // namespace pscore
