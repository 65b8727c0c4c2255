// The element-wise reduce kernels and half-precision conversions, against scalar references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "common/half.h"
#include "common/reduce.h"

namespace pscore {
namespace {

TEST(Half, RoundTripsEveryFloat16) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t v = static_cast<uint16_t>(h);
    float f = half_to_float(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_half(f), v) << std::hex << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 1.0f / 4096)), 1.0f);  // below half an ulp
  EXPECT_EQ(half_to_float(float_to_half(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(1e6f))));
  EXPECT_EQ(half_to_float(float_to_half(5.96046448e-08f)), 5.96046448e-08f);  // smallest subnormal
  EXPECT_EQ(bf16_to_float(float_to_bf16(3.0f)), 3.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.00390625f)), 1.0f);  // tie goes to even
}

TEST(Reduce, IntegerSumsWrapLikeTorch) {
  std::vector<int8_t> a = {127, -128, 5};
  std::vector<int8_t> b = {1, -1, 5};
  reduce_into(a.data(), b.data(), 3, DType::kInt8, ReduceOp::kSum);
  EXPECT_EQ(a, (std::vector<int8_t>{-128, 127, 10}));
  std::vector<int32_t> p = {std::numeric_limits<int32_t>::max(), 3};
  std::vector<int32_t> q = {2, -3};
  reduce_into(p.data(), q.data(), 2, DType::kInt32, ReduceOp::kProd);
  EXPECT_EQ(p, (std::vector<int32_t>{-2, -9}));
}

TEST(Reduce, EveryOpEveryType) {
  std::vector<double> a = {1, 5, -2, 7}, b = {3, 2, -4, 7};
  auto run = [&](DType t, ReduceOp op) {
    std::vector<double> out(4);
    // Round trip through the type via float conversions kept exact (small integers).
    std::vector<char> x(4 * 8), y(4 * 8);
    for (int i = 0; i < 4; ++i) {
      switch (t) {
        case DType::kFloat32:
          reinterpret_cast<float*>(x.data())[i] = a[i];
          reinterpret_cast<float*>(y.data())[i] = b[i];
          break;
        case DType::kFloat64:
          reinterpret_cast<double*>(x.data())[i] = a[i];
          reinterpret_cast<double*>(y.data())[i] = b[i];
          break;
        case DType::kInt64:
          reinterpret_cast<int64_t*>(x.data())[i] = a[i];
          reinterpret_cast<int64_t*>(y.data())[i] = b[i];
          break;
        case DType::kFloat16:
          reinterpret_cast<uint16_t*>(x.data())[i] = float_to_half(a[i]);
          reinterpret_cast<uint16_t*>(y.data())[i] = float_to_half(b[i]);
          break;
        case DType::kBFloat16:
          reinterpret_cast<uint16_t*>(x.data())[i] = float_to_bf16(a[i]);
          reinterpret_cast<uint16_t*>(y.data())[i] = float_to_bf16(b[i]);
          break;
        default:
          break;
      }
    }
    reduce_into(x.data(), y.data(), 4, t, op);
    for (int i = 0; i < 4; ++i) {
      switch (t) {
        case DType::kFloat32:
          out[i] = reinterpret_cast<float*>(x.data())[i];
          break;
        case DType::kFloat64:
          out[i] = reinterpret_cast<double*>(x.data())[i];
          break;
        case DType::kInt64:
          out[i] = reinterpret_cast<int64_t*>(x.data())[i];
          break;
        case DType::kFloat16:
          out[i] = half_to_float(reinterpret_cast<uint16_t*>(x.data())[i]);
          break;
        case DType::kBFloat16:
          out[i] = bf16_to_float(reinterpret_cast<uint16_t*>(x.data())[i]);
          break;
        default:
          break;
      }
    }
    return out;
  };
  for (DType t :
       {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kFloat16, DType::kBFloat16}) {
    EXPECT_EQ(run(t, ReduceOp::kSum), (std::vector<double>{4, 7, -6, 14}));
    EXPECT_EQ(run(t, ReduceOp::kProd), (std::vector<double>{3, 10, 8, 49}));
    EXPECT_EQ(run(t, ReduceOp::kMin), (std::vector<double>{1, 2, -4, 7}));
    EXPECT_EQ(run(t, ReduceOp::kMax), (std::vector<double>{3, 5, -2, 7}));
  }
}

TEST(Reduce, BitwiseOpsOnEveryIntegerType) {
  auto run = [](auto zero, DType t, ReduceOp op) {
    using T = decltype(zero);
    std::vector<T> a = {0b1100, 0b1010, 0x7f}, b = {0b1010, 0b0110, 0x0f};
    reduce_into(a.data(), b.data(), a.size(), t, op);
    return std::vector<int64_t>(a.begin(), a.end());
  };
  auto check = [&](auto zero, DType t) {
    EXPECT_EQ(run(zero, t, ReduceOp::kBand), (std::vector<int64_t>{0b1000, 0b0010, 0x0f}));
    EXPECT_EQ(run(zero, t, ReduceOp::kBor), (std::vector<int64_t>{0b1110, 0b1110, 0x7f}));
    EXPECT_EQ(run(zero, t, ReduceOp::kBxor), (std::vector<int64_t>{0b0110, 0b1100, 0x70}));
  };
  check(int8_t{}, DType::kInt8);
  check(uint8_t{}, DType::kUInt8);
  check(int32_t{}, DType::kInt32);
  check(int64_t{}, DType::kInt64);
}

TEST(Reduce, BitwiseOpsRejectFloatingPoint) {
  std::vector<float> a = {1.0f}, b = {2.0f};
  EXPECT_THROW(reduce_into(a.data(), b.data(), 1, DType::kFloat32, ReduceOp::kBand),
               std::invalid_argument);
}

TEST(Reduce, AverageDividesAfterTheSum) {
  std::vector<int32_t> a = {7, -7, 9};
  divide_by(a.data(), 3, DType::kInt32, 2);
  EXPECT_EQ(a, (std::vector<int32_t>{3, -3, 4}));  // truncation toward zero
  std::vector<float> f = {3.0f, 1.0f};
  divide_by(f.data(), 2, DType::kFloat32, 4);
  EXPECT_FLOAT_EQ(f[0], 0.75f);
}

// The kernels run in vector clones (AVX-512, AVX2) picked at load time: every length up to a few
// vectors, from misaligned starts, in place and out of place, against an element-wise reference.
template <typename T>
void check_vector_lengths(DType t) {
  for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
    for (size_t n = 0; n <= 200; ++n) {
      std::vector<T> a(n + offset), b(n + offset), out(n + offset);
      for (size_t i = 0; i < a.size(); ++i) {
        a[i] = static_cast<T>((i * 7) % 23);
        b[i] = static_cast<T>((i * 5) % 19);
      }
      const T* pa = a.data() + offset;
      const T* pb = b.data() + offset;
      reduce_to(out.data() + offset, pa, pb, n, t, ReduceOp::kMax);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[offset + i], std::max(pa[i], pb[i])) << n;
      std::vector<T> sum(a);
      reduce_into(sum.data() + offset, pb, n, t, ReduceOp::kSum);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(sum[offset + i], static_cast<T>(pa[i] + pb[i])) << n << " " << offset;
    }
  }
}

TEST(Reduce, VectorClonesAgreeWithElementWiseAtEveryLength) {
  check_vector_lengths<float>(DType::kFloat32);
  check_vector_lengths<double>(DType::kFloat64);
  check_vector_lengths<int8_t>(DType::kInt8);
  check_vector_lengths<uint8_t>(DType::kUInt8);
  check_vector_lengths<int32_t>(DType::kInt32);
  check_vector_lengths<int64_t>(DType::kInt64);
}

}  // namespace
}  // namespace pscore
