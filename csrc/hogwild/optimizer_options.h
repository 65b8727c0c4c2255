// The hyperparameters of each SharedTable optimizer, named and defaulted as torch.optim's SGD,
// Adagrad and Adam (AdamW is Adam with decoupled_weight_decay), and their validation.
#pragma once

#include <cstdint>
#include <string>

namespace pscore::hogwild {

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0.0;  // > 0 needs a table created with OptimizerState::kMomentum
  double dampening = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  double weight_decay = 0.0;
  bool maximize = false;
};

struct AdagradOptions {
  double lr = 0.01;
  double eps = 1e-10;
  double lr_decay = 0.0;  // lr / (1 + (step - 1) * lr_decay)
  double weight_decay = 0.0;
  bool maximize = false;
  uint64_t step = 0;  // lr_decay's step (>= 1); 0 takes the table's next global step
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  uint64_t step = 0;  // bias-correction step (>= 1); 0 takes the table's next global step
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW: w *= 1 - lr * weight_decay before the step
  bool amsgrad = false;                 // needs a table created with OptimizerState::kAmsgrad
  bool maximize = false;
};

// Each throws std::invalid_argument, prefixed with `what`, naming the option and its value when
// it is out of torch's range: lr, eps, momentum, lr_decay, weight_decay >= 0 and finite, betas in
// [0, 1), Nesterov with momentum > 0 and zero dampening.
void check_options(const SgdOptions& o, const std::string& what);
void check_options(const AdagradOptions& o, const std::string& what);
void check_options(const AdamOptions& o, const std::string& what);

}  // namespace pscore::hogwild
