// The host side of a GPU sparse update: checks the request and its coefficients, then hands it
// to the kernels (sparse_update_kernels.cu, or cuda_unavailable.cc in a build without CUDA).
// Plain C++, built with or without a CUDA compiler, so the host tests cover it.
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "hogwild/cuda/launch.h"
#include "hogwild/cuda/sparse_update_body.h"

namespace pscore::hogwild::cuda {

SparseCoefficients coefficients_of(const SparseUpdate& u) {
  const auto& k = u.coeffs;
  const bool sgd = u.kind == OptimizerKind::kSgd, adagrad = u.kind == OptimizerKind::kAdagrad;
  if (!sgd && !adagrad && u.kind != OptimizerKind::kAdam) {
    throw std::invalid_argument("hogwild cuda: no GPU kernel for optimizer kind " +
                                std::to_string(static_cast<int>(u.kind)) +
                                " (sgd, adagrad and adam have one)");
  }
  const size_t need = sgd ? 1 : adagrad ? 2 : 5;
  if (k.size() != need) {
    throw std::invalid_argument("hogwild cuda: expected " + std::to_string(need) +
                                " coefficients, got " + std::to_string(k.size()));
  }
  const GradTransform<double> plain;
  SparseCoefficients c;
  if (sgd) c.sgd = sgd_coefficients(k[0], 0, 0, false, plain).as<float>();
  if (adagrad) c.adagrad = adagrad_coefficients(k[0], 0, k[1], 1, plain).as<float>();
  if (u.kind == OptimizerKind::kAdam) {
    if (k[4] < 1) throw std::invalid_argument("hogwild cuda: adam step must be >= 1");
    c.adam = adam_coefficients(k[0], k[1], k[2], k[3], 0, false, false, static_cast<uint64_t>(k[4]))
                 .as<float>();
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
  if (u.kind != OptimizerKind::kSgd && !u.state0) {
    throw std::invalid_argument("hogwild cuda: this optimizer needs its state tensor(s)");
  }
  if (u.kind == OptimizerKind::kAdam && !u.state1) {
    throw std::invalid_argument("hogwild cuda: adam needs exp_avg and exp_avg_sq");
  }
  const SparseCoefficients c = coefficients_of(u);
  if (u.num_ids == 0) return;
  if (!u.ids || !u.grads) throw std::invalid_argument("hogwild cuda: null ids or grads");
  if (u.ids_dtype != DType::kInt64 && u.ids_dtype != DType::kInt32) {
    throw std::invalid_argument(std::string("hogwild cuda: ids are ") + dtype_name(u.ids_dtype) +
                                "; pass int32 or int64");
  }
  launch_sparse_update(u, c);
}

}  // namespace pscore::hogwild::cuda
