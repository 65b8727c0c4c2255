// One parity suite for the optimizer arithmetic of common/optimizer_formulas.h: every case runs
// three steps through each implementation that supports its options (the parameter server's
// apply_optimizer, the Hogwild CPU kernels of every instruction set, dense and sparse, and the
// CUDA body's host instantiation) and each step's float32 parameters are compared with
// torch.optim's (optimizer_parity_reference.h, written by data/make_optimizer_parity_reference.py).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/optimizer_formulas.h"
#include "hogwild/cuda/sparse_update_body.h"
#include "hogwild_kernel_helpers.h"
#include "optimizer_parity_reference.h"
#include "ps/storage/optimizer.h"

namespace {

namespace ref = parity_reference;
namespace ps = pscore::ps;
namespace hc = pscore::hogwild::cuda;
using hogwild_test::for_each_isa;
using pscore::OptimizerKind;

using Steps = std::vector<std::vector<float>>;  // parameters after each step

constexpr uint64_t kRows = 2, kDim = 3;
static_assert(kRows * kDim == ref::kElements, "the reference is a 2 x 3 table");

// One torch.optim configuration, in torch's names.
struct Case {
  std::string name;
  OptimizerKind kind;
  double lr;
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool amsgrad = false, maximize = false;
  double lr_decay = 0, initial_accumulator = 0;
  double alpha = 0.99;
  bool centered = false;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](const char* name, OptimizerKind kind, double lr) -> Case& {
    out.push_back(Case{name, kind, lr});
    return out.back();
  };
  add("sgd", OptimizerKind::kSgd, 0.1);
  Case& m = add("sgd_momentum", OptimizerKind::kSgd, 0.05);
  m.momentum = 0.9;
  m.dampening = 0.1;
  Case& n = add("sgd_nesterov_decay", OptimizerKind::kSgd, 0.05);
  n.momentum = 0.9;
  n.nesterov = true;
  n.weight_decay = 0.01;
  Case& sm = add("sgd_maximize", OptimizerKind::kSgd, 0.1);
  sm.weight_decay = 0.1;
  sm.maximize = true;
  add("adagrad", OptimizerKind::kAdagrad, 0.1).eps = 1e-10;
  Case& ao = add("adagrad_options", OptimizerKind::kAdagrad, 0.1);
  ao.eps = 1e-10;
  ao.lr_decay = 0.05;
  ao.weight_decay = 0.1;
  ao.initial_accumulator = 0.2;
  add("adam", OptimizerKind::kAdam, 0.01);
  Case& al = add("adam_l2_amsgrad", OptimizerKind::kAdam, 0.01);
  al.beta1 = 0.8;
  al.beta2 = 0.99;
  al.weight_decay = 0.1;
  al.amsgrad = true;
  add("adam_maximize", OptimizerKind::kAdam, 0.01).maximize = true;
  add("adamw", OptimizerKind::kAdamW, 0.01).weight_decay = 0.1;
  Case& wa = add("adamw_amsgrad", OptimizerKind::kAdamW, 0.02);
  wa.weight_decay = 0.05;
  wa.amsgrad = true;
  add("rmsprop", OptimizerKind::kRmsprop, 0.01);
  Case& rc = add("rmsprop_centered_momentum", OptimizerKind::kRmsprop, 0.01);
  rc.alpha = 0.9;
  rc.momentum = 0.5;
  rc.centered = true;
  rc.weight_decay = 0.1;
  return out;
}

std::vector<float> initial() { return {ref::kInitial, ref::kInitial + ref::kElements}; }
std::vector<float> grads(int step) {
  return {ref::kGrads[step], ref::kGrads[step] + ref::kElements};
}

// ---- The parameter server (no maximize option). ----

bool ps_supports(const Case& c) { return !c.maximize; }

Steps run_ps(const Case& c) {
  ps::OptimizerSpec s;
  s.kind = c.kind;
  s.lr = c.lr;
  s.momentum = c.momentum;
  s.dampening = c.dampening;
  s.weight_decay = c.weight_decay;
  s.nesterov = c.nesterov;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.eps = c.eps;
  s.amsgrad = c.amsgrad;
  s.lr_decay = c.lr_decay;
  s.initial_accumulator_value = c.initial_accumulator;
  s.alpha = c.alpha;
  s.centered = c.centered;
  s.validate();
  std::vector<float> w = initial();
  std::vector<float> state(static_cast<size_t>(s.num_slots()) * w.size());
  ps::init_optimizer_state(s, state.data(), ref::kElements);
  Steps out;
  for (int step = 0; step < ref::kSteps; ++step) {
    const std::vector<float> g = grads(step);
    ps::apply_optimizer(s, w.data(), g.data(), state.data(), ref::kElements, step + 1);
    out.push_back(w);
  }
  return out;
}

// ---- The Hogwild CPU kernels (SGD, Adagrad, Adam, AdamW). ----

bool hogwild_supports(const Case& c) { return c.kind != OptimizerKind::kRmsprop; }

hw::OptimizerState hogwild_state(const Case& c) {
  switch (c.kind) {
    case OptimizerKind::kSgd:
      return c.momentum != 0 ? hw::OptimizerState::kMomentum : hw::OptimizerState::kNone;
    case OptimizerKind::kAdagrad:
      return hw::OptimizerState::kAdagrad;
    default:
      return c.amsgrad ? hw::OptimizerState::kAmsgrad : hw::OptimizerState::kAdam;
  }
}

void hogwild_step(hw::SharedTable& t, const hw::UpdateBatch& b, const Case& c) {
  if (c.kind == OptimizerKind::kSgd) {
    hw::SgdOptions o;
    o.lr = c.lr;
    o.momentum = c.momentum;
    o.dampening = c.dampening;
    o.nesterov = c.nesterov;
    o.weight_decay = c.weight_decay;
    o.maximize = c.maximize;
    t.sgd(b, o);
  } else if (c.kind == OptimizerKind::kAdagrad) {
    hw::AdagradOptions o;
    o.lr = c.lr;
    o.eps = c.eps;
    o.lr_decay = c.lr_decay;
    o.weight_decay = c.weight_decay;
    o.maximize = c.maximize;
    t.adagrad(b, o);
  } else {
    hw::AdamOptions o;
    o.lr = c.lr;
    o.beta1 = c.beta1;
    o.beta2 = c.beta2;
    o.eps = c.eps;
    o.weight_decay = c.weight_decay;
    o.decoupled_weight_decay = c.kind == OptimizerKind::kAdamW;
    o.amsgrad = c.amsgrad;
    o.maximize = c.maximize;
    t.adam(b, o);
  }
}

// Every step as one dense batch, or as a sparse batch naming each row once.
Steps run_hogwild(const Case& c, bool dense) {
  auto t = hogwild_test::make_table<float>({kRows, kDim}, hogwild_state(c), initial(),
                                           c.initial_accumulator);
  const std::vector<int64_t> ids{1, 0};
  Steps out;
  for (int step = 0; step < ref::kSteps; ++step) {
    std::vector<float> g = grads(step);
    if (dense) {
      hogwild_step(*t, hogwild_test::dense_batch(g, false), c);
    } else {
      std::vector<float> swapped(g.begin() + kDim, g.end());  // row 1 first, then row 0
      swapped.insert(swapped.end(), g.begin(), g.begin() + kDim);
      hogwild_step(*t, hogwild_test::sparse_batch(ids, swapped, false), c);
    }
    out.push_back(hogwild_test::copy_of<float>(*t, -1));
  }
  t->close();
  t->unlink();
  return out;
}

// ---- The CUDA body on the host (plain SGD, Adagrad and Adam). ----

bool cuda_supports(const Case& c) {
  const bool plain = c.momentum == 0 && c.weight_decay == 0 && !c.maximize && !c.amsgrad &&
                     c.lr_decay == 0 && c.initial_accumulator == 0;
  return plain && (c.kind == OptimizerKind::kSgd || c.kind == OptimizerKind::kAdagrad ||
                   c.kind == OptimizerKind::kAdam);
}

template <OptimizerKind K>
void run_cuda_entries(const hc::DeviceTable& t, const std::vector<int64_t>& ids,
                      const std::vector<float>& g, const hc::SparseCoefficients& k) {
  const unsigned width = hc::lanes_per_entry(t.dim);
  for (uint64_t i = 0; i < ids.size(); ++i) {
    for (unsigned lane = 0; lane < width; ++lane) {
      hc::update_entry<K, 1>(t, ids.data(), g.data(), i, lane, width, k, hc::SerialAdd{});
    }
  }
}

Steps run_cuda_body(const Case& c) {
  std::vector<float> w = initial(), s0(w.size()), s1(w.size());
  const hc::DeviceTable t{w.data(), s0.data(), s1.data(), kRows, kDim};
  const std::vector<int64_t> ids{0, 1};
  Steps out;
  for (int step = 0; step < ref::kSteps; ++step) {
    hc::SparseUpdate u;
    u.kind = c.kind;
    if (c.kind == OptimizerKind::kSgd) {
      u.sgd.lr = c.lr;
      run_cuda_entries<OptimizerKind::kSgd>(t, ids, grads(step), hc::coefficients_of(u));
    } else if (c.kind == OptimizerKind::kAdagrad) {
      u.adagrad.lr = c.lr;
      u.adagrad.eps = c.eps;
      run_cuda_entries<OptimizerKind::kAdagrad>(t, ids, grads(step), hc::coefficients_of(u));
    } else {
      u.adam.lr = c.lr;
      u.adam.beta1 = c.beta1;
      u.adam.beta2 = c.beta2;
      u.adam.eps = c.eps;
      u.adam.step = static_cast<uint64_t>(step + 1);
      run_cuda_entries<OptimizerKind::kAdam>(t, ids, grads(step), hc::coefficients_of(u));
    }
    out.push_back(w);
  }
  return out;
}

// ---- Comparison with torch.optim. ----

const ref::Expected& expected(const std::string& name) {
  for (const auto& e : ref::kExpected) {
    if (name == e.name) return e;
  }
  throw std::invalid_argument("no torch reference for case " + name);
}

// A few float32 ulps of torch's value: the same arithmetic, up to FMA contraction and the order
// of float additions.
void expect_matches_torch(const Steps& got, const Case& c, const char* path) {
  const ref::Expected& want = expected(c.name);
  ASSERT_EQ(got.size(), static_cast<size_t>(ref::kSteps));
  for (int step = 0; step < ref::kSteps; ++step) {
    for (int i = 0; i < ref::kElements; ++i) {
      const float w = want.after[step][i];
      EXPECT_NEAR(got[step][i], w, 4e-7 * (1.0 + std::fabs(w)))
          << c.name << " on " << path << ", step " << step + 1 << ", element " << i;
    }
  }
}

TEST(OptimizerParity, EveryCaseHasATorchReference) {
  EXPECT_EQ(cases().size(), sizeof(ref::kExpected) / sizeof(ref::kExpected[0]));
  for (const Case& c : cases()) EXPECT_NO_THROW(expected(c.name)) << c.name;
}

TEST(OptimizerParity, ParameterServerMatchesTorch) {
  int ran = 0;
  for (const Case& c : cases()) {
    if (!ps_supports(c)) continue;
    expect_matches_torch(run_ps(c), c, "ps");
    ++ran;
  }
  EXPECT_EQ(ran, 11);
}

TEST(OptimizerParity, HogwildCpuKernelsMatchTorch) {
  int ran = 0;
  for_each_isa([&] {
    for (const Case& c : cases()) {
      if (!hogwild_supports(c)) continue;
      expect_matches_torch(run_hogwild(c, true), c, "hogwild dense");
      expect_matches_torch(run_hogwild(c, false), c, "hogwild sparse");
      ++ran;
    }
  });
  EXPECT_GE(ran, 11);
}

TEST(OptimizerParity, CudaBodyMatchesTorch) {
  int ran = 0;
  for (const Case& c : cases()) {
    if (!cuda_supports(c)) continue;
    expect_matches_torch(run_cuda_body(c), c, "cuda body");
    ++ran;
  }
  EXPECT_EQ(ran, 3);
}

// The coefficients every implementation takes: bias corrections and the decayed lr per step.
TEST(OptimizerParity, CoefficientsFoldTorchsStepFactors) {
  const auto a = pscore::adam_coefficients(0.1, 0.9, 0.99, 1e-8, 0.5, false, true, 3);
  EXPECT_DOUBLE_EQ(a.step_size, 0.1 / (1 - std::pow(0.9, 3)));
  EXPECT_DOUBLE_EQ(a.bias_correction2_sqrt, std::sqrt(1 - std::pow(0.99, 3)));
  EXPECT_DOUBLE_EQ(a.param_scale, 1.0);
  EXPECT_DOUBLE_EQ(a.grad.sign, -1.0);
  EXPECT_DOUBLE_EQ(a.grad.weight_decay, 0.5);
  const auto w = pscore::adam_coefficients(0.1, 0.9, 0.99, 1e-8, 0.5, true, false, 1);
  EXPECT_DOUBLE_EQ(w.param_scale, 1 - 0.1 * 0.5);
  EXPECT_DOUBLE_EQ(w.grad.weight_decay, 0.0);
  const auto g = pscore::adagrad_coefficients(0.1, 0.5, 1e-10, 3, pscore::GradTransform<double>{});
  EXPECT_DOUBLE_EQ(g.lr, 0.1 / (1 + 2 * 0.5));
}

}  // namespace
