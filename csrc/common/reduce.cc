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

// Conversions of a run of halves to floats and back, in vectors; both round as half.h does.
struct HalfConversions {
  void (*widen)(float* out, const uint16_t* in, size_t n);
  void (*narrow)(uint16_t* out, const float* in, size_t n);
};

#if defined(__x86_64__) && defined(__GNUC__)
// float16 through F16C's conversions, which round as float_to_half does (to nearest even) and
// take subnormals exactly; a NaN keeps its payload where float_to_half makes it the quiet NaN.
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_AVX) && (c & bit_F16C);
}

bool has_avx2() { return __builtin_cpu_supports("avx2"); }

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

// bfloat16 in integer arithmetic, as bf16_to_float and float_to_bf16 do it, eight at a time.
// (AVX512_BF16's vcvtneps2bf16 would flush subnormals to zero, where torch rounds them.)
__attribute__((target("avx2"))) void bf16s_to_floats(float* out, const uint16_t* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(wide, 16));
  }
  for (; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

__attribute__((target("avx2"))) void floats_to_bf16s(uint16_t* out, const float* in, size_t n) {
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, bias), _mm256_and_si256(high, one)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, magnitude), inf);
    const __m256i words = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, quiet), nan);
    // Packing works per 128-bit lane; the permute puts the two lanes' four words side by side.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(words, words), 0b1000);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

// AVX-512 folds of the half types, widening, folding and narrowing in registers: a 256 KB sum
// took 15 us for bfloat16 and 11 for float16, against 30 and 28 through the blocks below.
bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

#define PSCORE_AVX512 __attribute__((target("avx512f,avx512bw")))
// GCC 12's AVX-512 intrinsics leave their unused merge sources undefined, and warn about it
// wherever they are inlined.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

template <template <typename> class Op>
PSCORE_AVX512 __m512 vector_apply(__m512 a, __m512 b);
// MINPS and MAXPS return their second operand where either is NaN, as OpMin and OpMax do.
template <>
PSCORE_AVX512 __m512 vector_apply<SumSel>(__m512 a, __m512 b) {
  return _mm512_add_ps(a, b);
}
template <>
PSCORE_AVX512 __m512 vector_apply<ProdSel>(__m512 a, __m512 b) {
  return _mm512_mul_ps(a, b);
}
template <>
PSCORE_AVX512 __m512 vector_apply<OpMin>(__m512 a, __m512 b) {
  return _mm512_min_ps(b, a);
}
template <>
PSCORE_AVX512 __m512 vector_apply<OpMax>(__m512 a, __m512 b) {
  return _mm512_max_ps(b, a);
}

// The functions the AVX-512 kernels map over pairs of elements: on 16 floats, and on one (a
// run's tail).
template <template <typename> class Op>
struct VectorOp {
  PSCORE_AVX512 __m512 operator()(__m512 a, __m512 b) const { return vector_apply<Op>(a, b); }
  float operator()(float a, float b) const { return Op<float>::apply(a, b); }
};
// An average's division: the first element times 1/k, as divide_by does for floats.
struct Scale {
  float by;
  PSCORE_AVX512 __m512 operator()(__m512 a, __m512) const {
    return _mm512_mul_ps(a, _mm512_set1_ps(by));
  }
  float operator()(float a, float) const { return a * by; }
};

// As float_to_bf16, on each 32-bit lane: the bfloat16 in its low half.
PSCORE_AVX512 inline __m512i round_to_bf16(__m512 f) {
  const __m512i bits = _mm512_castps_si512(f);
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
}

// bfloat16s widen by interleaving with zeros, in an order of their own within each 128-bit lane;
// the pack narrows them back into the same order. 32 a step.
PSCORE_AVX512 inline __m512 widen_low_bf16s(__m512i v) {
  return _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), v));
}
PSCORE_AVX512 inline __m512 widen_high_bf16s(__m512i v) {
  return _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), v));
}

// dst = f(a, b) element by element, with a, b and dst bfloat16s.
template <class F>
PSCORE_AVX512 void bfloat16_map_avx512(uint16_t* dst, const uint16_t* a, const uint16_t* b,
                                       size_t n, F f) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i va = _mm512_loadu_si512(a + i), vb = _mm512_loadu_si512(b + i);
    const __m512 low = f(widen_low_bf16s(va), widen_low_bf16s(vb));
    const __m512 high = f(widen_high_bf16s(va), widen_high_bf16s(vb));
    _mm512_storeu_si512(dst + i, _mm512_packus_epi32(round_to_bf16(low), round_to_bf16(high)));
  }
  for (; i < n; ++i) dst[i] = float_to_bf16(f(bf16_to_float(a[i]), bf16_to_float(b[i])));
}

PSCORE_AVX512 inline __m512 widen_halves(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The same for float16s, 16 a step.
template <class F>
PSCORE_AVX512 void float16_map_avx512(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n,
                                      F f) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(dst + i),
        _mm512_cvtps_ph(f(widen_halves(a + i), widen_halves(b + i)), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = float_to_half(f(half_to_float(a[i]), half_to_float(b[i])));
}

// Whether the AVX-512 kernels ran for t (false where the CPU lacks them).
template <class F>
bool map_avx512(DType t, uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n, F f) {
  static const bool avx512 = has_avx512();
  if (!avx512) return false;
  if (t == DType::kFloat16)
    float16_map_avx512(dst, a, b, n, f);
  else
    bfloat16_map_avx512(dst, a, b, n, f);
  return true;
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The vector conversions this CPU has for t, or null.
const HalfConversions* vector_conversions(DType t) {
  static const HalfConversions f16{halves_to_floats, floats_to_halves};
  static const HalfConversions bf16{bf16s_to_floats, floats_to_bf16s};
  static const bool f16c = has_f16c(), avx2 = has_avx2();
  if (t == DType::kFloat16) return f16c ? &f16 : nullptr;
  return avx2 ? &bf16 : nullptr;
}
#else
const HalfConversions* vector_conversions(DType) { return nullptr; }
template <class F>
bool map_avx512(DType, uint16_t*, const uint16_t*, const uint16_t*, size_t, F) {
  return false;
}
template <template <typename> class Op>
struct VectorOp {};
struct Scale {
  float by;
};
#endif

// Widens blocks of a and b, folds the floats with the float kernel, narrows into dst.
template <template <typename> class Op>
void converted_kernel(const HalfConversions& c, uint16_t* dst, const uint16_t* a, const uint16_t* b,
                      size_t n) {
  constexpr size_t kBlock = 1024;
  float fa[kBlock], fb[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    c.widen(fa, a + base, m);
    c.widen(fb, b + base, m);
    kernel<float, Op>(fa, fa, fb, m);
    c.narrow(dst + base, fa, m);
  }
}

template <template <typename> class Op>
void float16_kernel(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  if (map_avx512(DType::kFloat16, dst, a, b, n, VectorOp<Op>{})) return;
  if (const HalfConversions* c = vector_conversions(DType::kFloat16))
    return converted_kernel<Op>(*c, dst, a, b, n);
  half_kernel<half_to_float, float_to_half, Op>(dst, a, b, n);
}

template <template <typename> class Op>
void bfloat16_kernel(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  if (map_avx512(DType::kBFloat16, dst, a, b, n, VectorOp<Op>{})) return;
  if (const HalfConversions* c = vector_conversions(DType::kBFloat16))
    return converted_kernel<Op>(*c, dst, a, b, n);
  half_kernel<bf16_to_float, float_to_bf16, Op>(dst, a, b, n);
}

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
      return bfloat16_kernel<Op>(static_cast<uint16_t*>(d), static_cast<const uint16_t*>(a),
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
PSCORE_VECTOR_CLONES void divide_kernel(T* d, size_t n, size_t k) {
  if constexpr (std::is_floating_point_v<T>) {
    T inv = static_cast<T>(1) / static_cast<T>(k);
    for (size_t i = 0; i < n; ++i) d[i] *= inv;
  } else {
    T div = static_cast<T>(k);
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / div);
  }
}
template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void divide_half(uint16_t* d, size_t n, size_t k, DType t) {
  if (map_avx512(t, d, d, d, n, Scale{1.0f / static_cast<float>(k)})) return;
  const HalfConversions* c = vector_conversions(t);
  if (!c) {
    const float inv = 1.0f / static_cast<float>(k);
    for (size_t i = 0; i < n; ++i) d[i] = FromF(ToF(d[i]) * inv);
    return;
  }
  constexpr size_t kBlock = 1024;
  float f[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    c->widen(f, d + base, m);
    divide_kernel(f, m, k);  // times 1/k, as above
    c->narrow(d + base, f, m);
  }
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
      return divide_half<half_to_float, float_to_half>(static_cast<uint16_t*>(dst), count, divisor,
                                                       dtype);
    case DType::kBFloat16:
      return divide_half<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(dst), count, divisor,
                                                       dtype);
  }
  throw std::invalid_argument("divide_by: unknown dtype");
}

}  // namespace pscore
