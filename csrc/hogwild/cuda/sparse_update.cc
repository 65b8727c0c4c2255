// The host side of a GPU sparse update: checks the request and its coefficients, then hands it
// to the kernels (sparse_update_kernels.cu, or cuda_unavailable.cc in a build without CUDA).
// Plain C++, built with or without a CUDA compiler, so the host tests cover it.
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "hogwild/cuda/launch.h"
#include "hogwild/cuda/sparse_update_body.h"

namespace pscore::hogwild::cuda {

namespace {

// Refuses an option the GPU kernels do not implement (`unset`: it has its default).
void take_only_defaults(bool unset, const char* optimizer, const char* option) {
  if (!unset) {
    throw std::invalid_argument(std::string("hogwild cuda: ") + optimizer + " " + option +
                                " is not supported by the GPU kernels; use the CPU SharedTable");
  }
}

SgdCoefficients<float> sgd_of(const SgdOptions& o) {
  check_options(o, "hogwild cuda: SGD");
  take_only_defaults(o.momentum == 0 && o.dampening == 0 && !o.nesterov, "SGD", "momentum");
  take_only_defaults(o.weight_decay == 0, "SGD", "weight_decay");
  take_only_defaults(!o.maximize, "SGD", "maximize");
  return sgd_coefficients(o.lr, 0, 0, false, GradTransform<double>{}).as<float>();
}

AdagradCoefficients<float> adagrad_of(const AdagradOptions& o) {
  check_options(o, "hogwild cuda: Adagrad");
  take_only_defaults(o.lr_decay == 0, "Adagrad", "lr_decay");
  take_only_defaults(o.weight_decay == 0, "Adagrad", "weight_decay");
  take_only_defaults(!o.maximize, "Adagrad", "maximize");
  return adagrad_coefficients(o.lr, 0, o.eps, 1, GradTransform<double>{}).as<float>();
}

AdamCoefficients<float> adam_of(const AdamOptions& o) {
  check_options(o, "hogwild cuda: Adam");
  take_only_defaults(o.weight_decay == 0 && !o.decoupled_weight_decay, "Adam", "weight_decay");
  take_only_defaults(!o.amsgrad, "Adam", "amsgrad");
  take_only_defaults(!o.maximize, "Adam", "maximize");
  if (o.step < 1) throw std::invalid_argument("hogwild cuda: adam step must be >= 1");
  return adam_coefficients(o.lr, o.beta1, o.beta2, o.eps, 0, false, false, o.step).as<float>();
}

}  // namespace

SparseCoefficients coefficients_of(const SparseUpdate& u) {
  SparseCoefficients c;
  switch (u.kind) {
    case OptimizerKind::kSgd:
      c.sgd = sgd_of(u.sgd);
      return c;
    case OptimizerKind::kAdagrad:
      c.adagrad = adagrad_of(u.adagrad);
      return c;
    case OptimizerKind::kAdam:
      c.adam = adam_of(u.adam);
      return c;
    default:
      throw std::invalid_argument("hogwild cuda: no GPU kernel for optimizer kind " +
                                  std::to_string(static_cast<int>(u.kind)) +
                                  " (sgd, adagrad and adam have one)");
  }
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
