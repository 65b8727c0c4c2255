// The GPU sparse updates' arithmetic and indexing (sparse_update_body.h), run on the host with a
// serial add in place of atomicAdd and every lane of a group visited in turn: checked against
// torch.optim's formulas applied per occurrence, with rows that repeat in a batch. Also the
// coefficient checks and the id range test, which run on every machine, GPU or not.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/error.h"
#include "hogwild/cuda/sparse_update_body.h"

namespace hc = pscore::hogwild::cuda;
using UpdateKind = pscore::OptimizerKind;

namespace {

struct Problem {
  uint64_t rows, dim;
  std::vector<float> w, s0, s1, grads;
  std::vector<int64_t> ids;
};

Problem make_problem(uint64_t rows, uint64_t dim, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Problem p{rows, dim, {}, {}, {}, {}, {}};
  for (uint64_t i = 0; i < rows * dim; ++i) p.w.push_back(normal(rng));
  p.s0.assign(rows * dim, 0.f);
  p.s1.assign(rows * dim, 0.f);
  for (size_t i = 0; i < n; ++i) p.ids.push_back(static_cast<int64_t>(rng() % rows));
  p.ids[n - 1] = p.ids[0];  // at least one repeat
  for (uint64_t i = 0; i < n * dim; ++i) p.grads.push_back(normal(rng));
  return p;
}

// A request of `kind` with these lr, eps, betas and Adam step (each kind reads its own).
struct Hyper {
  double lr = 0.01;
  double eps = 1e-10;
  double beta1 = 0.9;
  double beta2 = 0.999;
  uint64_t step = 1;
};

hc::SparseUpdate request(UpdateKind kind, const Hyper& h) {
  hc::SparseUpdate u;
  u.kind = kind;
  u.sgd.lr = u.adagrad.lr = u.adam.lr = h.lr;
  u.adagrad.eps = u.adam.eps = h.eps;
  u.adam.beta1 = h.beta1;
  u.adam.beta2 = h.beta2;
  u.adam.step = h.step;
  return u;
}

// Runs the device body on the host: entries in batch order, each by all `width` lanes, V floats
// at a time.
template <UpdateKind K, unsigned V = 1>
void run_on_host(Problem& p, const hc::SparseCoefficients& c, unsigned width) {
  const hc::DeviceTable t{p.w.data(), p.s0.data(), p.s1.data(), p.rows, p.dim};
  for (uint64_t i = 0; i < p.ids.size(); ++i) {
    for (unsigned lane = 0; lane < width; ++lane) {
      hc::update_entry<K, V>(t, p.ids.data(), p.grads.data(), i, lane, width, c, hc::SerialAdd{});
    }
  }
}

// torch.optim's updates in double, one occurrence after another.
void reference(UpdateKind kind, Problem& p, double lr, double b1, double b2, double eps, int t) {
  std::vector<double> w(p.w.begin(), p.w.end()), m(w.size()), v(w.size());
  for (size_t i = 0; i < p.ids.size(); ++i) {
    for (uint64_t j = 0; j < p.dim; ++j) {
      const uint64_t k = static_cast<uint64_t>(p.ids[i]) * p.dim + j;
      const double g = p.grads[i * p.dim + j];
      if (kind == UpdateKind::kSgd) {
        w[k] -= lr * g;
      } else if (kind == UpdateKind::kAdagrad) {
        m[k] += g * g;
        w[k] -= lr * g / (std::sqrt(m[k]) + eps);
      } else {
        m[k] = b1 * m[k] + (1 - b1) * g;
        v[k] = b2 * v[k] + (1 - b2) * g * g;
        const double denom = std::sqrt(v[k]) / std::sqrt(1 - std::pow(b2, t)) + eps;
        w[k] -= lr / (1 - std::pow(b1, t)) * m[k] / denom;
      }
    }
  }
  p.w.assign(w.begin(), w.end());
  p.s0.assign(m.begin(), m.end());
  p.s1.assign(v.begin(), v.end());
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-5 * (1.0 + std::fabs(want[i]))) << "element " << i;
  }
}

template <UpdateKind K, unsigned V>
void check_against_reference(const Hyper& h, uint64_t dim) {
  for (unsigned width : {hc::lanes_per_entry(dim / V), 32u}) {
    SCOPED_TRACE("dim " + std::to_string(dim) + ", V " + std::to_string(V) + ", width " +
                 std::to_string(width));
    Problem gpu = make_problem(23, dim, 40, 7);
    Problem ref = gpu;
    const hc::SparseCoefficients c = hc::coefficients_of(request(K, h));
    run_on_host<K, V>(gpu, c, width);
    reference(K, ref, h.lr, h.beta1, h.beta2, h.eps, static_cast<int>(h.step));
    expect_close(gpu.w, ref.w);
    if (K != UpdateKind::kSgd) expect_close(gpu.s0, ref.s0);
    if (K == UpdateKind::kAdam) expect_close(gpu.s1, ref.s1);
  }
}

// Every row width with one float per load, and the widths that allow it with four.
template <UpdateKind K>
void check_against_reference(const Hyper& h) {
  for (uint64_t dim : {1u, 3u, 4u, 37u, 64u, 300u}) {
    check_against_reference<K, 1>(h, dim);
    if (dim % 4 == 0) check_against_reference<K, 4>(h, dim);
  }
}

TEST(CudaBody, SgdMatchesTorchWithRepeatedRows) {
  check_against_reference<UpdateKind::kSgd>(Hyper{0.3});
}

TEST(CudaBody, AdagradMatchesTorchWithRepeatedRows) {
  check_against_reference<UpdateKind::kAdagrad>(Hyper{0.1, 1e-10});
}

TEST(CudaBody, AdamMatchesTorchWithRepeatedRowsAtLaterSteps) {
  for (uint64_t step : {1u, 7u}) {
    SCOPED_TRACE("step " + std::to_string(step));
    check_against_reference<UpdateKind::kAdam>(Hyper{0.01, 1e-8, 0.9, 0.999, step});
  }
}

TEST(CudaBody, SgdOfIntegerValuesIsExactWhateverTheRepeats) {
  Problem p = make_problem(4, 5, 30, 3);
  std::fill(p.w.begin(), p.w.end(), 0.f);
  std::fill(p.grads.begin(), p.grads.end(), -1.f);
  run_on_host<UpdateKind::kSgd>(p, hc::coefficients_of(request(UpdateKind::kSgd, Hyper{1.0})), 4);
  for (uint64_t r = 0; r < 4; ++r) {
    const float hits = static_cast<float>(std::count(p.ids.begin(), p.ids.end(), r));
    for (uint64_t j = 0; j < 5; ++j) EXPECT_EQ(p.w[r * 5 + j], hits);
  }
}

TEST(CudaBody, LanesCoverNarrowRowsWithoutIdling) {
  EXPECT_EQ(hc::lanes_per_entry(1), 1u);
  EXPECT_EQ(hc::lanes_per_entry(3), 4u);
  EXPECT_EQ(hc::lanes_per_entry(16), 16u);
  EXPECT_EQ(hc::lanes_per_entry(17), 32u);
  EXPECT_EQ(hc::lanes_per_entry(4096), 32u);
}

TEST(CudaBody, FourFloatsPerLoadOnlyWhereEveryRowIsSixteenByteAligned) {
  alignas(16) float w[16], s0[16], s1[16], grads[16];
  const auto table = [&](uint64_t dim, float* base, float* state) {
    return hc::DeviceTable{base, state, state ? s1 : nullptr, 16 / dim, dim};
  };
  EXPECT_EQ(hc::vector_width(table(4, w, nullptr), grads), 4u);
  EXPECT_EQ(hc::vector_width(table(8, w, s0), grads), 4u);
  EXPECT_EQ(hc::vector_width(table(2, w, s0), grads), 1u);      // rows of 8 bytes
  EXPECT_EQ(hc::vector_width(table(4, w + 1, s0), grads), 1u);  // the table
  EXPECT_EQ(hc::vector_width(table(4, w, s0 + 2), grads), 1u);  // a state array
  EXPECT_EQ(hc::vector_width(table(4, w, s0), grads + 3), 1u);  // the gradients
}

TEST(CudaBody, IdRangeCheck) {
  EXPECT_TRUE(hc::id_out_of_range<int64_t>(-1, 10));
  EXPECT_TRUE(hc::id_out_of_range<int64_t>(10, 10));
  EXPECT_FALSE(hc::id_out_of_range<int64_t>(9, 10));
  EXPECT_TRUE(hc::id_out_of_range<int32_t>(-2147483647 - 1, 10));
  EXPECT_FALSE(hc::id_out_of_range<int32_t>(0, 1));
  EXPECT_TRUE(hc::id_out_of_range<int64_t>(int64_t{1} << 40, uint64_t{1} << 40));
}

// The message std::invalid_argument carries for request `u`, or "" when it is accepted.
std::string refusal(const hc::SparseUpdate& u) {
  try {
    hc::coefficients_of(u);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(CudaBody, CoefficientsAreCheckedAndFoldedLikeTheCpuKernels) {
  EXPECT_NE(refusal(request(UpdateKind::kSgd, Hyper{-1})).find("lr"), std::string::npos);
  EXPECT_NE(refusal(request(UpdateKind::kAdagrad, Hyper{0.01, -1})).find("eps"), std::string::npos);
  EXPECT_EQ(refusal(request(UpdateKind::kAdam, Hyper{0.01, 1e-8, 0.9, 0.999, 0})),
            "hogwild cuda: adam step must be >= 1");
  const hc::SparseCoefficients c =
      hc::coefficients_of(request(UpdateKind::kAdam, Hyper{0.1, 1e-8, 0.9, 0.99, 2}));
  EXPECT_FLOAT_EQ(c.adam.step_size, static_cast<float>(0.1 / (1 - 0.81)));
  EXPECT_FLOAT_EQ(c.adam.bias_correction2_sqrt, static_cast<float>(std::sqrt(1 - 0.99 * 0.99)));
  EXPECT_NE(refusal(request(UpdateKind::kRmsprop, {})).find("no GPU kernel"), std::string::npos);
}

TEST(CudaBody, OptionsTheKernelsDoNotTakeAreRefusedByName) {
  hc::SparseUpdate u = request(UpdateKind::kSgd, {});
  u.sgd.momentum = 0.9;
  EXPECT_EQ(refusal(u),
            "hogwild cuda: SGD momentum is not supported by the GPU kernels; use the CPU "
            "SharedTable");
  u = request(UpdateKind::kAdagrad, {});
  u.adagrad.lr_decay = 0.1;
  EXPECT_NE(refusal(u).find("Adagrad lr_decay is not supported"), std::string::npos);
  u = request(UpdateKind::kAdam, {});
  u.adam.amsgrad = true;
  EXPECT_NE(refusal(u).find("Adam amsgrad is not supported"), std::string::npos);
  u.adam.amsgrad = false;
  u.adam.decoupled_weight_decay = true;
  EXPECT_NE(refusal(u).find("Adam weight_decay is not supported"), std::string::npos);
}

TEST(CudaBody, RequestsAreCheckedBeforeAnyKernel) {
  hc::SparseUpdate u = request(UpdateKind::kAdagrad, Hyper{0.1, 1e-10});
  if (!hc::built()) {
    EXPECT_THROW(hc::sparse_update(u), pscore::Error);  // says CUDA is missing, first
    return;
  }
  EXPECT_THROW(hc::sparse_update(u), std::invalid_argument);  // null table
  float w = 0;
  u.table = &w;
  u.rows = u.dim = 1;
  EXPECT_THROW(hc::sparse_update(u), std::invalid_argument);  // no accumulator
  u.state0 = &w;
  u.ids_dtype = pscore::DType::kFloat32;
  u.num_ids = 1;
  u.ids = &w;
  u.grads = &w;
  EXPECT_THROW(hc::sparse_update(u), std::invalid_argument);  // float ids
}

}  // namespace
