// The kernels for x86-64 CPUs with AVX2 and FMA (8 floats per instruction instead of 4). Every
// header that is not part of the kernel bodies is included before the target switch, so only
// the code in namespace avx2 is built for AVX2.
#include <cmath>
#include <cstdint>

#include "common/dtype.h"
#include "hogwild/kernels.h"
#include "hogwild/owner_lock.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#pragma GCC target("avx2,fma")
#define PSCORE_KERNEL_ISA avx2
#include "hogwild/kernel_bodies.h"
#else
namespace pscore::hogwild::avx2 {
KernelFn kernel(OptimizerKind, DType) { return nullptr; }
KernelFn axpy_kernel(DType) { return nullptr; }
}  // namespace pscore::hogwild::avx2
#endif
