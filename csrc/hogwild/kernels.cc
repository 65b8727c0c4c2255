#include "hogwild/kernels.h"

#include <atomic>
#include <stdexcept>
#include <string>

namespace pscore::hogwild {
namespace {

bool cpu_has_avx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// The best this CPU runs; Python applies PSCORE_HOGWILD_ISA through set_kernel_isa.
KernelIsa initial_isa() {
  return kernel_isa_supported(KernelIsa::kAvx2) ? KernelIsa::kAvx2 : KernelIsa::kBaseline;
}

std::atomic<int>& selected() {
  static std::atomic<int> isa{static_cast<int>(initial_isa())};
  return isa;
}

}  // namespace

bool kernel_isa_supported(KernelIsa isa) {
  if (isa == KernelIsa::kBaseline) return true;
  static const bool avx2 = cpu_has_avx2() && avx2::axpy_kernel(DType::kFloat32);
  return avx2;
}

KernelIsa kernel_isa() {
  return static_cast<KernelIsa>(selected().load(std::memory_order_relaxed));
}

void set_kernel_isa(KernelIsa isa) {
  if (!kernel_isa_supported(isa)) {
    throw std::invalid_argument(std::string("this CPU or build has no ") + kernel_isa_name(isa) +
                                " kernels");
  }
  selected().store(static_cast<int>(isa), std::memory_order_relaxed);
}

const char* kernel_isa_name(KernelIsa isa) { return isa == KernelIsa::kAvx2 ? "avx2" : "baseline"; }

KernelFn kernel(OptimizerKind op, DType dtype) {
  return kernel_isa() == KernelIsa::kAvx2 ? avx2::kernel(op, dtype) : baseline::kernel(op, dtype);
}

KernelFn axpy_kernel(DType dtype) {
  return kernel_isa() == KernelIsa::kAvx2 ? avx2::axpy_kernel(dtype) : baseline::axpy_kernel(dtype);
}

}  // namespace pscore::hogwild
