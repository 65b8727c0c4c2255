// The host side of a GPU sparse update: checks the request and its coefficients, then hands it
// to the kernels (sparse_update_kernels.cu, or cuda_unavailable.cc in a build without CUDA).
// Plain C++, built with or without a CUDA compiler, so the host tests cover it.
#include <cmath>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "hogwild/cuda/launch.h"
#include "hogwild/cuda/sparse_update_body.h"

namespace pscore::hogwild::cuda {

Coeffs coeffs_of(const SparseUpdate& u) {
  const auto& k = u.coeffs;
  const size_t need = u.kind == UpdateKind::kSgd ? 1 : u.kind == UpdateKind::kAdagrad ? 2 : 5;
  if (k.size() != need) {
    throw std::invalid_argument("hogwild cuda: expected " + std::to_string(need) +
                                " coefficients, got " + std::to_string(k.size()));
  }
  Coeffs c;
  c.lr = static_cast<float>(k[0]);
  if (u.kind == UpdateKind::kAdagrad) c.eps = static_cast<float>(k[1]);
  if (u.kind == UpdateKind::kAdam) {
    if (k[4] < 1) throw std::invalid_argument("hogwild cuda: adam step must be >= 1");
    c.beta1 = static_cast<float>(k[1]);
    c.beta2 = static_cast<float>(k[2]);
    c.eps = static_cast<float>(k[3]);
    c.step_size = static_cast<float>(k[0] / (1.0 - std::pow(k[1], k[4])));
    c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(k[2], k[4])));
  }
  return c;
}

void sparse_update(const SparseUpdate& u) {
  if (!built()) {
    throw Error(
        "pscore was built without CUDA (CMake found no CUDA compiler), so the GPU Hogwild "
        "kernels are not available; rebuild with nvcc on PATH or use the CPU SharedTable");
  }
  if (!u.table || u.rows == 0 || u.dim == 0) {
    throw std::invalid_argument("hogwild cuda: empty or null table");
  }
  if (u.kind != UpdateKind::kSgd && !u.state0) {
    throw std::invalid_argument("hogwild cuda: this optimizer needs its state tensor(s)");
  }
  if (u.kind == UpdateKind::kAdam && !u.state1) {
    throw std::invalid_argument("hogwild cuda: adam needs exp_avg and exp_avg_sq");
  }
  const Coeffs c = coeffs_of(u);
  if (u.num_ids == 0) return;
  if (!u.ids || !u.grads) throw std::invalid_argument("hogwild cuda: null ids or grads");
  if (u.ids_dtype != DType::kInt64 && u.ids_dtype != DType::kInt32) {
    throw std::invalid_argument(std::string("hogwild cuda: ids are ") + dtype_name(u.ids_dtype) +
                                "; pass int32 or int64");
  }
  launch_sparse_update(u, c);
}

}  // namespace pscore::hogwild::cuda
