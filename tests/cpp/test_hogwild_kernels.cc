// Each update kernel (SGD, Adagrad, Adam, axpy; sparse and dense; float and double; locked and
// lock-free) against a plain reference loop, and every bad batch rejected with nothing written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "hogwild/coalesce.h"
#include "hogwild/kernels.h"
#include "hogwild/shared_table.h"
#include "hogwild_kernel_helpers.h"

namespace {

using namespace hogwild_test;

template <typename T>
class KernelTest : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KernelTest, Types);

TYPED_TEST(KernelTest, SgdSparseAndDenseMatchReference) {
  using T = TypeParam;
  for_each_isa([&] {
    for (uint64_t dim : {1u, 3u, 64u, 300u}) {
      for (bool locked : {false, true}) {
        const uint64_t rows = 17;
        auto w0 = randn<T>(rows * dim, 1);
        auto t = make_table<T>({rows, dim}, hw::OptimizerState::kNone, w0);
        auto ids = ids_with_repeats(rows, 9, 2);
        auto g = randn<T>(ids.size() * dim, 3);
        t->sgd(sparse_batch(ids, g, locked), {0.5});
        std::vector<T> ref = w0;
        for (size_t i = 0; i < ids.size(); ++i) {
          for (uint64_t j = 0; j < dim; ++j) ref[ids[i] * dim + j] -= T(0.5) * g[i * dim + j];
        }
        expect_near_all(copy_of<T>(*t, -1), ref, 1e-6);
        auto gd = randn<T>(rows * dim, 4);
        t->sgd(dense_batch(gd, locked), {0.25});
        for (size_t k = 0; k < ref.size(); ++k) ref[k] -= T(0.25) * gd[k];
        expect_near_all(copy_of<T>(*t, -1), ref, 1e-6);
        t->axpy(2.0, gd.data(), gd.size(), dtype_of<T>(), locked);
        for (size_t k = 0; k < ref.size(); ++k) ref[k] += T(2.0) * gd[k];
        expect_near_all(copy_of<T>(*t, -1), ref, 1e-6);
        EXPECT_EQ(t->update_count(), 3u);
      }
    }
  });
}

TYPED_TEST(KernelTest, AdagradMatchesReference) {
  using T = TypeParam;
  for_each_isa([&] {
    for (uint64_t dim : {1u, 5u, 64u, 300u}) {
      for (bool locked : {false, true}) {
        const uint64_t rows = 11;
        auto w0 = randn<T>(rows * dim, 5);
        auto t = make_table<T>({rows, dim}, hw::OptimizerState::kAdagrad, w0, 0.1);
        std::vector<T> w = w0, acc(rows * dim, T(0.1));
        for (int step = 0; step < 3; ++step) {
          auto ids = ids_with_repeats(rows, 7, 10 + step);
          auto g = randn<T>(ids.size() * dim, 20 + step);
          t->adagrad(sparse_batch(ids, g, locked), {0.1, 1e-10});
          for (size_t i = 0; i < ids.size(); ++i) {
            for (uint64_t j = 0; j < dim; ++j) {
              size_t k = ids[i] * dim + j;
              acc[k] += g[i * dim + j] * g[i * dim + j];
              w[k] -= T(0.1) * g[i * dim + j] / (std::sqrt(acc[k]) + T(1e-10));
            }
          }
        }
        expect_near_all(copy_of<T>(*t, -1), w, 1e-5);
        expect_near_all(copy_of<T>(*t, 0), acc, 1e-5);
      }
    }
  });
}

TYPED_TEST(KernelTest, AdamMatchesReference) {
  using T = TypeParam;
  for_each_isa([&] {
    for (uint64_t dim : {1u, 7u, 64u, 260u}) {
      const uint64_t rows = 9;
      auto w0 = randn<T>(rows * dim, 6);
      auto t = make_table<T>({rows, dim}, hw::OptimizerState::kAdam, w0);
      std::vector<T> w = w0, m(rows * dim, 0), v(rows * dim, 0);
      const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8;
      for (uint64_t step = 1; step <= 3; ++step) {
        auto ids = ids_with_repeats(rows, 6, 30 + step);
        auto g = randn<T>(ids.size() * dim, 40 + step);
        hw::AdamOptions o{lr, b1, b2, eps, step};
        t->adam(sparse_batch(ids, g, step == 2), o);
        const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
        for (size_t i = 0; i < ids.size(); ++i) {
          for (uint64_t j = 0; j < dim; ++j) {
            size_t k = ids[i] * dim + j;
            double gj = g[i * dim + j];
            m[k] = b1 * m[k] + (1 - b1) * gj;
            v[k] = b2 * v[k] + (1 - b2) * gj * gj;
            w[k] -= lr / bc1 * m[k] / (std::sqrt(v[k]) / std::sqrt(bc2) + eps);
          }
        }
      }
      expect_near_all(copy_of<T>(*t, -1), w, 1e-5);
      expect_near_all(copy_of<T>(*t, 0), m, 1e-5);
      expect_near_all(copy_of<T>(*t, 1), v, 1e-5);
    }
  });
}

TEST(KernelGlobalStep, AdamWithoutStepUsesTheTablesCounter) {
  auto t = make_table<float>({4, 2}, hw::OptimizerState::kAdam, std::vector<float>(8, 0.f));
  std::vector<int64_t> ids{1};
  std::vector<float> g{1.f, -1.f};
  t->adam(sparse_batch(ids, g, false), {0.1, 0.9, 0.999, 1e-8, 0});
  t->adam(sparse_batch(ids, g, false), {0.1, 0.9, 0.999, 1e-8, 0});
  EXPECT_EQ(t->step(), 2u);
  // With bias correction the first two Adam steps of a constant gradient move by ~lr each.
  const float* w = static_cast<const float*>(t->array(-1));
  EXPECT_NEAR(w[2], -0.2f, 1e-4);
  EXPECT_NEAR(w[3], 0.2f, 1e-4);
}

TEST(KernelInt32Ids, Int32IdsWork) {
  auto t = make_table<float>({5, 2}, hw::OptimizerState::kNone, std::vector<float>(10, 1.f));
  std::vector<int32_t> ids{4, 0, 4};
  std::vector<float> g(6, 1.f);
  hw::UpdateBatch b;
  b.ids = ids.data();
  b.num_ids = 3;
  b.ids_dtype = DType::kInt32;
  b.grads = g.data();
  b.grads_numel = 6;
  t->sgd(b, {1.0});
  const float* w = static_cast<const float*>(t->array(-1));
  EXPECT_EQ(w[0], 0.f);
  EXPECT_EQ(w[8], -1.f);
  EXPECT_EQ(w[4], 1.f);
}

// Runs `fn`, expects std::invalid_argument mentioning `needle`, and checks nothing was written.
template <typename Fn>
void expect_rejected(hw::SharedTable& t, Fn fn, const std::string& needle) {
  auto before = copy_of<float>(t, -1);
  try {
    fn();
    FAIL() << "expected std::invalid_argument containing '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(copy_of<float>(t, -1), before);
}

TEST(KernelErrors, BadBatchesWriteNothing) {
  auto t = make_table<float>({6, 4}, hw::OptimizerState::kNone, randn<float>(24, 7));
  std::vector<float> g(3 * 4, 1.f);
  std::vector<int64_t> late_bad{0, 1, 6};  // the bad id comes last: the first rows are untouched
  expect_rejected(
      *t, [&] { t->sgd(sparse_batch(late_bad, g, false), {0.1}); },
      "ids[2] = 6 is out of range [0, 6)");
  std::vector<int64_t> negative{0, -1, 2};
  expect_rejected(
      *t, [&] { t->sgd(sparse_batch(negative, g, true), {0.1}); }, "ids[1] = -1 is out of range");
  std::vector<int64_t> ok{0, 1, 2};
  std::vector<float> short_g(5, 1.f);
  expect_rejected(
      *t, [&] { t->sgd(sparse_batch(ok, short_g, false), {0.1}); },
      "grads hold 5 elements; 3 ids x 6 rows x 4 need 12");
  std::vector<double> g64(12, 1.0);
  expect_rejected(
      *t, [&] { t->sgd(sparse_batch(ok, g64, false), {0.1}); },
      "grads are float64 but the table holds float32");
  auto bad_ids = sparse_batch(ok, g, false);
  bad_ids.ids_dtype = DType::kFloat32;
  expect_rejected(*t, [&] { t->sgd(bad_ids, {0.1}); }, "pass int32 or int64");
  expect_rejected(*t, [&] { t->sgd(sparse_batch(ok, g, false), {-1.0}); }, "lr = -1");
  expect_rejected(
      *t, [&] { t->adagrad(sparse_batch(ok, g, false), {0.1, 1e-10}); },
      "created with optimizer='none'; adagrad needs optimizer='adagrad'");
  expect_rejected(*t, [&] { t->adam(sparse_batch(ok, g, false), {}); }, "needs optimizer='adam'");
  expect_rejected(*t, [&] { t->axpy(NAN, g.data(), 24, DType::kFloat32, false); }, "not finite");
  expect_rejected(
      *t, [&] { t->axpy(1.0, g.data(), 12, DType::kFloat32, false); },
      "grads hold 12 elements; the whole table, 6 rows x 4 need 24");
  EXPECT_EQ(t->update_count(), 0u);
}

TEST(KernelErrors, AdamRejectsBadBetasAndClosedTablesThrow) {
  auto t = make_table<float>({2, 2}, hw::OptimizerState::kAdam, std::vector<float>(4, 0.f));
  std::vector<int64_t> ids{0};
  std::vector<float> g{1.f, 1.f};
  expect_rejected(
      *t, [&] { t->adam(sparse_batch(ids, g, false), {0.1, 1.0, 0.9, 1e-8, 1}); },
      "must lie in [0, 1)");
  t->close();
  EXPECT_THROW(t->sgd(sparse_batch(ids, g, false), {0.1}), pscore::Error);
  EXPECT_THROW(t->array(2), std::invalid_argument);  // Adam keeps slots 0 and 1 only
}

TEST(KernelIsa, UnsupportedSetsAreRefused) {
  EXPECT_TRUE(hw::kernel_isa_supported(hw::KernelIsa::kBaseline));
  if (!hw::kernel_isa_supported(hw::KernelIsa::kAvx2)) {
    EXPECT_THROW(hw::set_kernel_isa(hw::KernelIsa::kAvx2), std::invalid_argument);
  }
  hw::set_kernel_isa(hw::KernelIsa::kBaseline);
  EXPECT_EQ(hw::kernel_isa(), hw::KernelIsa::kBaseline);
}

TEST(KernelErrors, EmptyBatchIsANoOp) {
  auto t = make_table<float>({3, 2}, hw::OptimizerState::kNone, std::vector<float>(6, 2.f));
  std::vector<int64_t> ids;
  std::vector<float> g;
  t->sgd(sparse_batch(ids, g, false), {0.1});
  EXPECT_EQ(copy_of<float>(*t, -1), std::vector<float>(6, 2.f));
}

TEST(Coalesce, RepeatedIdsAreSummedInBatchOrder) {
  const std::vector<int32_t> ids{3, 1, 3, 0, 1, 3};
  const std::vector<double> g{1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60};  // 6 rows x 2
  const hw::UpdateBatch b = sparse_batch(ids, g, false);
  hw::CoalescedBatch c;
  ASSERT_TRUE(hw::coalesce(b, 2, &c));
  EXPECT_EQ(c.ids, (std::vector<int64_t>{3, 1, 0}));  // in order of first appearance
  ASSERT_EQ(c.batch.num_ids, 3u);
  EXPECT_EQ(c.batch.grads_numel, 6u);
  EXPECT_EQ(c.batch.ids_dtype, DType::kInt64);
  const double* s = static_cast<const double*>(c.batch.grads);
  EXPECT_EQ(std::vector<double>(s, s + 6), (std::vector<double>{10, 100, 7, 70, 4, 40}));
}

TEST(Coalesce, FloatRowsAndBatchesWithoutRepeats) {
  const std::vector<int64_t> ids{2, 0, 2};
  const std::vector<float> g{1.5f, 2.5f, 4.f};  // dim 1
  hw::UpdateBatch b = sparse_batch(ids, g, false);
  hw::CoalescedBatch c;
  ASSERT_TRUE(hw::coalesce(b, 1, &c));
  const float* s = static_cast<const float*>(c.batch.grads);
  EXPECT_EQ(c.ids, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(s[0], 5.5f);
  EXPECT_EQ(s[1], 2.5f);
  const std::vector<int64_t> distinct{4, 1, 2};
  hw::UpdateBatch d = sparse_batch(distinct, g, false);
  EXPECT_FALSE(hw::coalesce(d, 1, &c)) << "nothing repeats: the batch is used as it is";
}

}  // namespace
