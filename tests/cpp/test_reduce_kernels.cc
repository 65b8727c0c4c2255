// The element-wise reduce kernels and half-precision conversions, against scalar references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "common/half.h"
#include "common/reduce.h"

namespace pscore {
namespace {

// The branching conversions the kernels used before theirs became branch-free: the reference
// (bf16_to_float, a shift, was never branching).
uint16_t reference_float_to_bf16(float f) {
  uint32_t bits = float_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float reference_half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return bits_float(bits);
}

uint16_t reference_float_to_half(float f) {
  uint32_t bits = float_bits(f);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t absbits = bits & 0x7fffffffu;
  if (absbits > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (absbits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absbits < 0x38800000u) {  // subnormal or zero in half
    if (absbits < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t exp = absbits >> 23;
    uint32_t mant = (absbits & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14 + (113 - exp) ... places the value in 10-bit subnormal
    uint32_t half_mant = mant >> (shift);
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t exp = (absbits >> 23) - 127 + 15;
  uint32_t mant = absbits & 0x7fffffu;
  uint32_t half = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

TEST(Half, BranchFreeConversionsMatchTheReferenceBitForBit) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    ASSERT_EQ(float_bits(half_to_float(static_cast<uint16_t>(h))),
              float_bits(reference_half_to_float(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
  // Every float whose low 11 bits are one of a few patterns (ties, just off ties, zero), and a
  // stride through all the others.
  auto check = [](uint32_t u) {
    const float f = bits_float(u);
    ASSERT_EQ(float_to_half(f), reference_float_to_half(f)) << std::hex << u;
    ASSERT_EQ(float_to_bf16(f), reference_float_to_bf16(f)) << std::hex << u;
  };
  for (uint64_t hi = 0; hi < (uint64_t{1} << 21); ++hi)
    for (uint32_t lo : {0x000u, 0x001u, 0x3ffu, 0x400u, 0x401u, 0x7ffu})
      check(static_cast<uint32_t>(hi << 11) | lo);
  for (uint64_t u = 0; u <= 0xffffffffu; u += 9973) check(static_cast<uint32_t>(u));
}

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

// Half types fold through vector conversions (F16C for float16) in blocks; every length up to
// past a block, any bit pattern (subnormals, infinities, NaN, sums past 65504), every op, against
// the branching reference conversions.
void check_half_lengths(DType t) {
  const bool f16 = t == DType::kFloat16;
  auto widen = [&](uint16_t h) { return f16 ? reference_half_to_float(h) : bf16_to_float(h); };
  auto narrow = [&](float f) {
    return f16 ? reference_float_to_half(f) : reference_float_to_bf16(f);
  };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
    for (size_t n :
         {size_t{0}, size_t{7}, size_t{8}, size_t{9}, size_t{255}, size_t{1031}, size_t{2500}}) {
      std::vector<uint16_t> a(n + 1), b(n + 1);
      for (size_t i = 0; i < a.size(); ++i) {
        a[i] = static_cast<uint16_t>(((i + 1) * 2654435761u) >> 13);
        b[i] = static_cast<uint16_t>(((i + 7) * 40503u) ^ (i << 3));
      }
      std::vector<uint16_t> out(a);
      reduce_into(out.data() + 1, b.data() + 1, n, t, op);
      for (size_t i = 1; i <= n; ++i) {
        const float x = widen(a[i]), y = widen(b[i]);
        const float r = op == ReduceOp::kSum    ? x + y
                        : op == ReduceOp::kProd ? x * y
                        : op == ReduceOp::kMin  ? (y < x ? y : x)
                                                : (x < y ? y : x);
        const uint16_t want = narrow(r);
        if (std::isnan(r)) {
          ASSERT_TRUE(std::isnan(widen(out[i]))) << n << " " << i;
        } else {
          ASSERT_EQ(out[i], want) << std::hex << a[i] << " " << b[i] << std::dec << " op "
                                  << static_cast<int>(op) << " at " << i << " of " << n;
        }
      }
    }
  }
}

TEST(Reduce, HalfTypesFoldAsTheirConversionsSayAtEveryLength) {
  check_half_lengths(DType::kFloat16);
  check_half_lengths(DType::kBFloat16);
}

// An average's division runs through the same vector conversions: any bit pattern, lengths past
// a block, against widening, multiplying by 1/k and narrowing one element at a time.
TEST(Reduce, HalfTypesDivideAsTheirConversionsSayAtEveryLength) {
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    const bool f16 = t == DType::kFloat16;
    auto widen = [&](uint16_t h) { return f16 ? reference_half_to_float(h) : bf16_to_float(h); };
    auto narrow = [&](float f) {
      return f16 ? reference_float_to_half(f) : reference_float_to_bf16(f);
    };
    for (size_t k : {size_t{2}, size_t{3}, size_t{7}}) {
      for (size_t n : {size_t{1}, size_t{8}, size_t{9}, size_t{1031}, size_t{2500}}) {
        std::vector<uint16_t> x(n + 1);
        for (size_t i = 0; i < x.size(); ++i)
          x[i] = static_cast<uint16_t>(((i + 3) * 2654435761u) >> 11);
        std::vector<uint16_t> out(x);
        divide_by(out.data() + 1, n, t, k);
        const float inv = 1.0f / static_cast<float>(k);
        for (size_t i = 1; i <= n; ++i) {
          const float want = widen(x[i]) * inv;
          if (std::isnan(want))
            ASSERT_TRUE(std::isnan(widen(out[i]))) << i;
          else
            ASSERT_EQ(out[i], narrow(want)) << std::hex << x[i] << std::dec << " / " << k;
        }
        ASSERT_EQ(out[0], x[0]);  // nothing before the run is touched
      }
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
