// In-place square roots in SIMD registers. GCC will not vectorise std::sqrt unless the whole
// file is built with -fno-math-errno, so the optimizer rows take their square roots here.
// Part of the kernel bodies: include only from kernel_bodies.h (PSCORE_KERNEL_ISA set).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__SSE2__)
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif

#ifndef PSCORE_KERNEL_ISA
#error "vector_sqrt.h is part of the kernel bodies; include hogwild/kernel_bodies.h"
#endif

namespace pscore::hogwild::PSCORE_KERNEL_ISA {

// x[i] = sqrt(x[i]) for i < n.
inline void sqrt_inplace(float* __restrict x, uint64_t n) {
  uint64_t i = 0;
#if defined(__AVX__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#endif
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#elif defined(__ARM_NEON) && defined(__aarch64__)
  for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vsqrtq_f32(vld1q_f32(x + i)));
#endif
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}

inline void sqrt_inplace(double* __restrict x, uint64_t n) {
  uint64_t i = 0;
#if defined(__AVX__)
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(x + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
#endif
#if defined(__SSE2__)
  for (; i + 2 <= n; i += 2) _mm_storeu_pd(x + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
#elif defined(__ARM_NEON) && defined(__aarch64__)
  for (; i + 2 <= n; i += 2) vst1q_f64(x + i, vsqrtq_f64(vld1q_f64(x + i)));
#endif
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}

}  // namespace pscore::hogwild::PSCORE_KERNEL_ISA
