#include "common/reduce.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/half.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace pscore {
namespace {

template <typename T>
struct OpMin {
  static T apply(T a, T b) { return b < a ? b : a; }
};
template <typename T>
struct OpMax {
  static T apply(T a, T b) { return a < b ? b : a; }
};

// Integer sums wrap like torch's (two's complement), not UB: compute in the unsigned type.
template <typename T>
struct WrapSum {
  static T apply(T a, T b) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  }
};
template <typename T>
struct WrapProd {
  static T apply(T a, T b) {
    using U = std::make_unsigned_t<T>;
    if constexpr (sizeof(T) < sizeof(int)) {
      return static_cast<T>(static_cast<unsigned>(static_cast<U>(a)) *
                            static_cast<unsigned>(static_cast<U>(b)));
    } else {
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    }
  }
};

template <typename T>
struct OpBand {
  static T apply(T a, T b) { return static_cast<T>(a & b); }
};
template <typename T>
struct OpBor {
  static T apply(T a, T b) { return static_cast<T>(a | b); }
};
template <typename T>
struct OpBxor {
  static T apply(T a, T b) { return static_cast<T>(a ^ b); }
};

// The element-wise kernels are cloned for AVX-512 and AVX2 and the loader picks one (ifunc): a
// build for baseline x86-64 folds with SSE2. A 256 KB float sum in cache: 9.0 us SSE2, 5.6 cloned;
// 4 MB: 146 us, 105. ThreadSanitizer's runtime is not up when the loader resolves an ifunc (the
// tests crashed), so its builds keep the baseline kernels, as clang's do (it does not clone
// templates).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) && \
    !defined(__SANITIZE_THREAD__)
#define PSCORE_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PSCORE_VECTOR_CLONES
#endif

template <typename T, template <typename> class Op>
PSCORE_VECTOR_CLONES void kernel(T* dst, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op<T>::apply(a[i], b[i]);
}

// Half types: widen to float, apply, narrow. Processed in blocks so the float loop vectorises.
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), template <typename> class Op>
PSCORE_VECTOR_CLONES void half_kernel(uint16_t* dst, const uint16_t* a, const uint16_t* b,
                                      size_t n) {
  constexpr size_t kBlock = 256;
  float fa[kBlock], fb[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    size_t m = std::min(kBlock, n - base);
    for (size_t i = 0; i < m; ++i) {
      fa[i] = ToF(a[base + i]);
      fb[i] = ToF(b[base + i]);
    }
    for (size_t i = 0; i < m; ++i) fa[i] = Op<float>::apply(fa[i], fb[i]);
    for (size_t i = 0; i < m; ++i) dst[base + i] = FromF(fa[i]);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// float16 through F16C's conversions, which round as float_to_half does (to nearest even) and
// take subnormals exactly; a NaN keeps its payload where float_to_half makes it the quiet NaN.
bool has_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_AVX) && (c & bit_F16C);
  }();
  return yes;
}

__attribute__((target("avx,f16c"))) void halves_to_floats(float* out, const uint16_t* in,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

__attribute__((target("avx,f16c"))) void floats_to_halves(uint16_t* out, const float* in,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

template <template <typename> class Op>
void float16_kernel(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  if (!has_f16c()) return half_kernel<half_to_float, float_to_half, Op>(dst, a, b, n);
  constexpr size_t kBlock = 1024;
  float fa[kBlock], fb[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    halves_to_floats(fa, a + base, m);
    halves_to_floats(fb, b + base, m);
    kernel<float, Op>(fa, fa, fb, m);
    floats_to_halves(dst + base, fa, m);
  }
}
#else
template <template <typename> class Op>
void float16_kernel(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  half_kernel<half_to_float, float_to_half, Op>(dst, a, b, n);
}
#endif

// Runs Op on the integer types; false for any other dtype.
template <template <typename> class Op>
bool integer_kernel(void* d, const void* a, const void* b, size_t n, DType t) {
  switch (t) {
    case DType::kInt8:
      kernel<int8_t, Op>(static_cast<int8_t*>(d), static_cast<const int8_t*>(a),
                         static_cast<const int8_t*>(b), n);
      return true;
    case DType::kUInt8:
      kernel<uint8_t, Op>(static_cast<uint8_t*>(d), static_cast<const uint8_t*>(a),
                          static_cast<const uint8_t*>(b), n);
      return true;
    case DType::kInt32:
      kernel<int32_t, Op>(static_cast<int32_t*>(d), static_cast<const int32_t*>(a),
                          static_cast<const int32_t*>(b), n);
      return true;
    case DType::kInt64:
      kernel<int64_t, Op>(static_cast<int64_t*>(d), static_cast<const int64_t*>(a),
                          static_cast<const int64_t*>(b), n);
      return true;
    default:
      return false;
  }
}

template <template <typename> class Op>
void dispatch_types(void* d, const void* a, const void* b, size_t n, DType t) {
  if (integer_kernel<Op>(d, a, b, n, t)) return;
  switch (t) {
    case DType::kFloat32:
      return kernel<float, Op>(static_cast<float*>(d), static_cast<const float*>(a),
                               static_cast<const float*>(b), n);
    case DType::kFloat64:
      return kernel<double, Op>(static_cast<double*>(d), static_cast<const double*>(a),
                                static_cast<const double*>(b), n);
    case DType::kFloat16:
      return float16_kernel<Op>(static_cast<uint16_t*>(d), static_cast<const uint16_t*>(a),
                                static_cast<const uint16_t*>(b), n);
    case DType::kBFloat16:
      return half_kernel<bf16_to_float, float_to_bf16, Op>(static_cast<uint16_t*>(d),
                                                           static_cast<const uint16_t*>(a),
                                                           static_cast<const uint16_t*>(b), n);
    default:
      throw std::invalid_argument("reduce: unknown dtype");
  }
}

// Bitwise ops exist for the integer types only.
template <template <typename> class Op>
void dispatch_integers(void* d, const void* a, const void* b, size_t n, DType t, ReduceOp op) {
  if (!integer_kernel<Op>(d, a, b, n, t)) {
    throw std::invalid_argument(std::string("reduce: ") + reduce_op_name(op) +
                                " needs an integer dtype, got " + dtype_name(t));
  }
}

// Sum and prod on signed integers must wrap (as torch does); min/max are safe natively.
template <typename T>
struct SumSel {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>)
      return WrapSum<T>::apply(a, b);
    else
      return static_cast<T>(a + b);
  }
};
template <typename T>
struct ProdSel {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using S = std::make_signed_t<T>;
      return static_cast<T>(WrapProd<S>::apply(static_cast<S>(a), static_cast<S>(b)));
    } else {
      return a * b;
    }
  }
};

}  // namespace

void reduce_to(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return dispatch_types<SumSel>(dst, a, b, count, dtype);
    case ReduceOp::kProd:
      return dispatch_types<ProdSel>(dst, a, b, count, dtype);
    case ReduceOp::kMin:
      return dispatch_types<OpMin>(dst, a, b, count, dtype);
    case ReduceOp::kMax:
      return dispatch_types<OpMax>(dst, a, b, count, dtype);
    case ReduceOp::kBand:
      return dispatch_integers<OpBand>(dst, a, b, count, dtype, op);
    case ReduceOp::kBor:
      return dispatch_integers<OpBor>(dst, a, b, count, dtype, op);
    case ReduceOp::kBxor:
      return dispatch_integers<OpBxor>(dst, a, b, count, dtype, op);
  }
  throw std::invalid_argument("reduce: unknown op");
}

void reduce_into(void* dst, const void* src, size_t count, DType dtype, ReduceOp op) {
  reduce_to(dst, dst, src, count, dtype, op);
}

namespace {
template <typename T>
void divide_kernel(T* d, size_t n, size_t k) {
  if constexpr (std::is_floating_point_v<T>) {
    T inv = static_cast<T>(1) / static_cast<T>(k);
    for (size_t i = 0; i < n; ++i) d[i] *= inv;
  } else {
    T div = static_cast<T>(k);
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / div);
  }
}
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void divide_half(uint16_t* d, size_t n, size_t k) {
  float inv = 1.0f / static_cast<float>(k);
  for (size_t i = 0; i < n; ++i) d[i] = FromF(ToF(d[i]) * inv);
}
}  // namespace

void divide_by(void* dst, size_t count, DType dtype, size_t divisor) {
  if (count == 0 || divisor <= 1) return;
  switch (dtype) {
    case DType::kFloat32:
      return divide_kernel(static_cast<float*>(dst), count, divisor);
    case DType::kFloat64:
      return divide_kernel(static_cast<double*>(dst), count, divisor);
    case DType::kInt8:
      return divide_kernel(static_cast<int8_t*>(dst), count, divisor);
    case DType::kUInt8:
      return divide_kernel(static_cast<uint8_t*>(dst), count, divisor);
    case DType::kInt32:
      return divide_kernel(static_cast<int32_t*>(dst), count, divisor);
    case DType::kInt64:
      return divide_kernel(static_cast<int64_t*>(dst), count, divisor);
    case DType::kFloat16:
      return divide_half<half_to_float, float_to_half>(static_cast<uint16_t*>(dst), count, divisor);
    case DType::kBFloat16:
      return divide_half<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(dst), count, divisor);
  }
  throw std::invalid_argument("divide_by: unknown dtype");
}

}  // namespace pscore
