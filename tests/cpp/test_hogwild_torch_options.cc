// torch.optim's options on the update kernels: SGD's momentum (the buffer starts as the first
// gradient, per row), dampening, Nesterov, weight decay and maximize; Adagrad's lr_decay; Adam's
// L2 and decoupled (AdamW) weight decay, amsgrad and maximize. Each against a reference loop
// written from torch's formulas in double, dense and sparse (a sparse row steps as the dense
// update of that row), float and double, both instruction sets; bad options rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "hogwild_kernel_helpers.h"

namespace {

using namespace hogwild_test;

// One row-step of torch.optim.SGD on element arrays of one row, in double.
struct SgdRef {
  hw::SgdOptions o;
  std::vector<double> w, buf;
  std::vector<bool> started;
  uint64_t dim;

  void row_step(uint64_t r, const double* g) {
    for (uint64_t j = 0; j < dim; ++j) {
      const uint64_t k = r * dim + j;
      double d = (o.maximize ? -g[j] : g[j]) + o.weight_decay * w[k];
      if (o.momentum != 0) {
        buf[k] = started[r] ? o.momentum * buf[k] + (1 - o.dampening) * d : d;
        d = o.nesterov ? d + o.momentum * buf[k] : buf[k];
      }
      w[k] -= o.lr * d;
    }
    started[r] = true;
  }
};

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
void run_sgd_case(const hw::SgdOptions& o, uint64_t dim, bool locked) {
  const uint64_t rows = 7;
  const auto w0 = randn<double>(rows * dim, 1);
  const auto state = o.momentum != 0 ? hw::OptimizerState::kMomentum : hw::OptimizerState::kNone;
  auto t = make_table<T>({rows, dim}, state, as<T>(w0));
  SgdRef ref{o, w0, std::vector<double>(rows * dim, 0), std::vector<bool>(rows, false), dim};
  // Sparse steps first (rows start at different times), then dense ones over every row.
  for (int step = 0; step < 3; ++step) {
    const auto ids = ids_with_repeats(rows, 4, 50 + step);
    const auto g = randn<double>(ids.size() * dim, 60 + step);
    t->sgd(sparse_batch(ids, as<T>(g), locked), o);
    for (size_t i = 0; i < ids.size(); ++i) ref.row_step(ids[i], g.data() + i * dim);
  }
  for (int step = 0; step < 2; ++step) {
    const auto g = randn<double>(rows * dim, 70 + step);
    t->sgd(dense_batch(as<T>(g), locked), o);
    for (uint64_t r = 0; r < rows; ++r) ref.row_step(r, g.data() + r * dim);
  }
  expect_near_all(copy_of<T>(*t, -1), as<T>(ref.w), 1e-5);
  if (o.momentum != 0) expect_near_all(copy_of<T>(*t, 0), as<T>(ref.buf), 1e-5);
}

template <typename T>
class TorchOptionsTest : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(TorchOptionsTest, Types);

TYPED_TEST(TorchOptionsTest, SgdMomentumDampeningNesterovWeightDecayMaximize) {
  const std::vector<hw::SgdOptions> cases = {
      {0.1, 0.5, 0.0, false, 0.0, false},   // mnist_hogwild's
      {0.1, 0.9, 0.3, false, 0.0, false},   // dampening: the first step still takes all of g
      {0.05, 0.9, 0.0, true, 0.01, false},  // Nesterov with weight decay
      {0.1, 0.0, 0.0, false, 0.1, true},    // weight decay and maximize, no buffer
      {0.1, 0.7, 0.2, false, 0.05, true},
  };
  for_each_isa([&] {
    for (const auto& o : cases) {
      for (uint64_t dim : {3u, 300u}) {
        SCOPED_TRACE("momentum " + std::to_string(o.momentum) + " dim " + std::to_string(dim));
        run_sgd_case<TypeParam>(o, dim, dim == 3);
      }
    }
  });
}

TYPED_TEST(TorchOptionsTest, AdagradLrDecayWeightDecayMaximize) {
  using T = TypeParam;
  for_each_isa([&] {
    for (bool maximize : {false, true}) {
      const uint64_t rows = 5, dim = 9;
      const auto w0 = randn<double>(rows * dim, 3);
      auto t = make_table<T>({rows, dim}, hw::OptimizerState::kAdagrad, as<T>(w0), 0.2);
      std::vector<double> w = w0, acc(rows * dim, 0.2);
      hw::AdagradOptions o{0.1, 1e-10, 0.5, 0.02, maximize, 0};
      for (uint64_t step = 1; step <= 3; ++step) {
        const auto g = randn<double>(rows * dim, 80 + step);
        t->adagrad(dense_batch(as<T>(g), false), o);  // step 0: the table counts 1, 2, 3
        const double clr = o.lr / (1 + (step - 1) * o.lr_decay);
        for (size_t k = 0; k < w.size(); ++k) {
          const double d = (maximize ? -g[k] : g[k]) + o.weight_decay * w[k];
          acc[k] += d * d;
          w[k] -= clr * d / (std::sqrt(acc[k]) + o.eps);
        }
      }
      EXPECT_EQ(t->step(), 3u);
      expect_near_all(copy_of<T>(*t, -1), as<T>(w), 1e-5);
      expect_near_all(copy_of<T>(*t, 0), as<T>(acc), 1e-5);
    }
  });
}

TYPED_TEST(TorchOptionsTest, AdamWeightDecayAdamWAmsgradMaximize) {
  using T = TypeParam;
  struct Case {
    double weight_decay;
    bool decoupled, amsgrad, maximize;
  };
  for_each_isa([&] {
    for (const Case& c : {Case{0.1, false, false, false}, Case{0.1, true, true, false},
                          Case{0.0, false, true, true}, Case{0.05, true, false, true}}) {
      const uint64_t rows = 6, dim = 5;
      const auto w0 = randn<double>(rows * dim, 4);
      const auto state = c.amsgrad ? hw::OptimizerState::kAmsgrad : hw::OptimizerState::kAdam;
      auto t = make_table<T>({rows, dim}, state, as<T>(w0));
      std::vector<double> w = w0, m(w.size(), 0), v(w.size(), 0), vmax(w.size(), 0);
      hw::AdamOptions o{0.01,           0.9,         0.99,      1e-8,      0,
                        c.weight_decay, c.decoupled, c.amsgrad, c.maximize};
      for (uint64_t step = 1; step <= 4; ++step) {
        const std::vector<int64_t> ids{static_cast<int64_t>(step % rows), 2, 4};
        const auto g = randn<double>(ids.size() * dim, 90 + step);
        t->adam(sparse_batch(ids, as<T>(g), step == 3), o);
        const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
        for (size_t i = 0; i < ids.size(); ++i) {
          for (uint64_t j = 0; j < dim; ++j) {
            const size_t k = ids[i] * dim + j;
            double d = c.maximize ? -g[i * dim + j] : g[i * dim + j];
            if (c.decoupled) {
              w[k] *= 1 - o.lr * o.weight_decay;
            } else {
              d += o.weight_decay * w[k];
            }
            m[k] = o.beta1 * m[k] + (1 - o.beta1) * d;
            v[k] = o.beta2 * v[k] + (1 - o.beta2) * d * d;
            vmax[k] = std::max(vmax[k], v[k]);
            const double denom = std::sqrt(c.amsgrad ? vmax[k] : v[k]) / std::sqrt(bc2) + o.eps;
            w[k] -= o.lr / bc1 * m[k] / denom;
          }
        }
      }
      expect_near_all(copy_of<T>(*t, -1), as<T>(w), 1e-5);
      expect_near_all(copy_of<T>(*t, 0), as<T>(m), 1e-5);
      if (c.amsgrad) expect_near_all(copy_of<T>(*t, 2), as<T>(vmax), 1e-5);
    }
  });
}

// Expects std::invalid_argument containing `needle` and the table left as it was.
template <typename Fn>
void expect_refused(const hw::SharedTable& t, Fn fn, const std::string& needle) {
  const auto before = copy_of<float>(t, -1);
  try {
    fn();
    ADD_FAILURE() << "expected std::invalid_argument containing '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(copy_of<float>(t, -1), before);
}

TEST(TorchOptionsErrors, BadOptionsAndMissingStateWriteNothing) {
  auto plain = make_table<float>({3, 2}, hw::OptimizerState::kNone, randn<float>(6, 5));
  auto mom = make_table<float>({3, 2}, hw::OptimizerState::kMomentum, randn<float>(6, 6));
  auto adam = make_table<float>({3, 2}, hw::OptimizerState::kAdam, randn<float>(6, 7));
  auto ada = make_table<float>({3, 2}, hw::OptimizerState::kAdagrad, randn<float>(6, 8));
  const std::vector<float> g(6, 1.f);
  const auto b = dense_batch(g, false);
  expect_refused(
      *plain, [&] { plain->sgd(b, {0.1, 0.5}); },
      "needs a table created with optimizer='momentum'");
  expect_refused(
      *mom, [&] { mom->sgd(b, {0.1, 0.5, 0.1, true}); },
      "Nesterov momentum needs momentum > 0 and dampening == 0");
  expect_refused(*plain, [&] { plain->sgd(b, {0.1, 0.0, 0.0, true}); }, "Nesterov");
  expect_refused(
      *mom, [&] { mom->sgd(b, {0.1, -0.5}); }, "momentum = -0.5 must be finite and >= 0");
  expect_refused(*plain, [&] { plain->sgd(b, {0.1, 0.0, 0.0, false, -1.0}); }, "weight_decay = -1");
  expect_refused(*ada, [&] { ada->adagrad(b, {0.1, 1e-10, -0.1}); }, "lr_decay = -0.1");
  hw::AdamOptions ams;
  ams.amsgrad = true;
  expect_refused(*adam, [&] { adam->adam(b, ams); }, "adam with amsgrad needs optimizer='amsgrad'");
  EXPECT_EQ(mom->step(), 0u);
  EXPECT_EQ(ada->step(), 0u) << "a refused call takes no step";
  EXPECT_THROW(plain->row_flags(), std::invalid_argument);
}

}  // namespace
