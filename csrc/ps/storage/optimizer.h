// Server-side optimizer kernels with torch.optim's update rules (SGD with momentum/Nesterov/weight
// decay, Adagrad, Adam, AdamW, RMSprop) and the gradient clipping applied to each pushed gradient.
#pragma once

#include <cstdint>

#include "ps/wire/table_spec.h"

namespace pscore::ps {

// One optimizer step on n elements. State slot k lives at state + k * slot_stride (default n:
// a sparse row is a block of dim elements; a slice of a dense part passes the part's size).
// `step` counts this block's updates including this one (1 on the first), as torch's
// per-parameter state["step"].
void apply_optimizer(const OptimizerSpec& spec, float* param, const float* grad, float* state,
                     int64_t n, int64_t step, int64_t slot_stride = -1);

// Fills a fresh block's state slots (Adagrad's initial_accumulator_value, zeros otherwise).
void init_optimizer_state(const OptimizerSpec& spec, float* state, int64_t n);

// Clamps each element of g to [-clip_value, clip_value] when the spec asks for it.
void clip_gradient_values(const OptimizerSpec& spec, float* g, int64_t n);
// torch.nn.utils.clip_grad_norm_'s factor for a gradient of this L2 norm (1 when not clipping).
float clip_norm_factor(const OptimizerSpec& spec, double grad_norm);
// Sum of squares of n floats, accumulated in double.
double sum_of_squares(const float* g, int64_t n);
void scale_in_place(float* g, int64_t n, float factor);
void add_in_place(float* acc, const float* g, int64_t n);

}  // namespace pscore::ps
