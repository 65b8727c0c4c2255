// The kernels for any CPU of the build's target (x86-64: SSE2).
#define PSCORE_KERNEL_ISA baseline
#include "hogwild/kernel_bodies.h"
