// Helpers of the Hogwild kernel tests: tables, random data, batches, comparisons, and a loop
// over the instruction sets the CPU supports.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "hogwild/kernels.h"
#include "hogwild/shared_table.h"

namespace hw = pscore::hogwild;
using pscore::DType;

namespace hogwild_test {

inline std::string unique_name(const char* tag) {
  static int n = 0;
  return std::string("gt-") + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
}

template <typename T>
constexpr DType dtype_of() {
  return sizeof(T) == 4 ? DType::kFloat32 : DType::kFloat64;
}

template <typename T>
std::shared_ptr<hw::SharedTable> make_table(std::vector<uint64_t> shape, hw::OptimizerState opt,
                                            const std::vector<T>& init, double acc0 = 0.0) {
  hw::TableSpec spec;
  spec.shape = std::move(shape);
  spec.dtype = dtype_of<T>();
  spec.optimizer = opt;
  hw::CreateOptions o;
  o.init = init.data();
  o.init_nbytes = init.size() * sizeof(T);
  o.initial_accumulator = acc0;
  return hw::SharedTable::create(unique_name("k"), spec, o);
}

template <typename T>
std::vector<T> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d;
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(rng));
  return v;
}

template <typename T>
std::vector<T> copy_of(const hw::SharedTable& t, int slot) {
  const T* p = static_cast<const T*>(t.array(slot));
  return std::vector<T>(p, p + t.rows() * t.dim());
}

template <typename T, typename Id = int64_t>
hw::UpdateBatch sparse_batch(const std::vector<Id>& ids, const std::vector<T>& g, bool locked) {
  hw::UpdateBatch b;
  b.ids = ids.data();
  b.num_ids = ids.size();
  b.ids_dtype = sizeof(Id) == 4 ? DType::kInt32 : DType::kInt64;
  b.grads = g.data();
  b.grads_numel = g.size();
  b.grads_dtype = dtype_of<T>();
  b.locked = locked;
  return b;
}

template <typename T>
void expect_near_all(const std::vector<T>& got, const std::vector<T>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * (1.0 + std::fabs(want[i]))) << "element " << i;
  }
}

// Rows 0..rows-1 with ids that repeat (so repeated ids apply one after another).
inline std::vector<int64_t> ids_with_repeats(uint64_t rows, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> ids(n);
  for (auto& i : ids) i = static_cast<int64_t>(rng() % rows);
  if (n > 2) ids[n - 1] = ids[0];
  return ids;
}

// Runs body once per instruction set this CPU supports (baseline, and AVX2 where present).
template <typename Fn>
void for_each_isa(Fn body) {
  for (auto isa : {hw::KernelIsa::kBaseline, hw::KernelIsa::kAvx2}) {
    if (!hw::kernel_isa_supported(isa)) continue;
    hw::set_kernel_isa(isa);
    SCOPED_TRACE(hw::kernel_isa_name(isa));
    body();
  }
}

template <typename T>
hw::UpdateBatch dense_batch(const std::vector<T>& g, bool locked) {
  hw::UpdateBatch b;
  b.dense = true;
  b.grads = g.data();
  b.grads_numel = g.size();
  b.grads_dtype = dtype_of<T>();
  b.locked = locked;
  return b;
}

}  // namespace hogwild_test
