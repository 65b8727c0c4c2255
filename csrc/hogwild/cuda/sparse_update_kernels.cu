// GPU versions of the sparse Hogwild updates for float32 tables. One thread per (id, column):
// consecutive threads walk a row, so loads and stores coalesce. Rows that repeat in a batch are
// combined with atomicAdd, the GPU form of Hogwild's unlocked writes: SGD and the Adagrad
// accumulator sum exactly; Adam's moments move by atomic deltas from the value each thread read.
// Ids are checked on the device first; a bad id stops every update kernel before it writes.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "common/dtype.h"
#include "common/error.h"
#include "hogwild/cuda/cuda_updates.h"

namespace pscore::hogwild::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kNoBadId = ULLONG_MAX;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw Error(std::string("hogwild cuda: ") + what + ": " + cudaGetErrorString(err));
  }
}

// Records the smallest index whose id is outside [0, rows).
template <typename Id>
__global__ void find_bad_id(const Id* ids, uint64_t n, uint64_t rows, unsigned long long* bad) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const Id id = ids[i];
    if (id < 0 || static_cast<uint64_t>(id) >= rows) atomicMin(bad, i);
  }
}

struct Coeffs {
  float lr, eps, beta1, beta2, step_size, inv_sqrt_bc2;
};

template <typename Id>
__global__ void update_rows(UpdateKind kind, float* __restrict__ w, float* __restrict__ s0,
                            float* __restrict__ s1, uint64_t dim, const Id* __restrict__ ids,
                            uint64_t n, const float* __restrict__ grads, Coeffs c,
                            const unsigned long long* bad) {
  if (*bad != kNoBadId) return;
  const uint64_t total = n * dim;
  for (uint64_t e = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; e < total;
       e += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t i = e / dim;
    const uint64_t k = static_cast<uint64_t>(ids[i]) * dim + (e - i * dim);
    const float g = grads[e];
    if (kind == UpdateKind::kSgd) {
      atomicAdd(w + k, -c.lr * g);
    } else if (kind == UpdateKind::kAdagrad) {
      const float a = atomicAdd(s0 + k, g * g) + g * g;
      atomicAdd(w + k, -c.lr * g / (sqrtf(a) + c.eps));
    } else {
      const float dm = (1.f - c.beta1) * (g - s0[k]);
      const float m = atomicAdd(s0 + k, dm) + dm;
      const float dv = (1.f - c.beta2) * (g * g - s1[k]);
      const float v = atomicAdd(s1 + k, dv) + dv;
      atomicAdd(w + k, -c.step_size * m / (sqrtf(v) * c.inv_sqrt_bc2 + c.eps));
    }
  }
}

unsigned int blocks_for(uint64_t work) {
  const uint64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(b < 65535 * 8 ? (b == 0 ? 1 : b) : 65535 * 8);
}

Coeffs coeffs_of(const SparseUpdate& u) {
  const auto& k = u.coeffs;
  const size_t need = u.kind == UpdateKind::kSgd ? 1 : u.kind == UpdateKind::kAdagrad ? 2 : 5;
  if (k.size() != need) {
    throw std::invalid_argument("hogwild cuda: expected " + std::to_string(need) +
                                " coefficients, got " + std::to_string(k.size()));
  }
  Coeffs c{};
  c.lr = static_cast<float>(k[0]);
  if (u.kind == UpdateKind::kAdagrad) c.eps = static_cast<float>(k[1]);
  if (u.kind == UpdateKind::kAdam) {
    c.beta1 = static_cast<float>(k[1]);
    c.beta2 = static_cast<float>(k[2]);
    c.eps = static_cast<float>(k[3]);
    if (k[4] < 1) throw std::invalid_argument("hogwild cuda: adam step must be >= 1");
    c.step_size = static_cast<float>(k[0] / (1.0 - std::pow(k[1], k[4])));
    c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(k[2], k[4])));
  }
  return c;
}

// One scratch word per thread and device for the bad-id index (calls synchronise before return).
unsigned long long* scratch_word() {
  thread_local unsigned long long* words[64] = {};
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev < 0 || dev >= 64) throw Error("hogwild cuda: device index out of range");
  if (!words[dev]) check(cudaMalloc(&words[dev], sizeof(unsigned long long)), "cudaMalloc");
  return words[dev];
}

template <typename Id>
void run(const SparseUpdate& u, const Coeffs& c) {
  auto stream = static_cast<cudaStream_t>(u.stream);
  const Id* ids = static_cast<const Id*>(u.ids);
  unsigned long long* bad = scratch_word();
  check(cudaMemsetAsync(bad, 0xff, sizeof(*bad), stream), "cudaMemsetAsync");
  find_bad_id<Id><<<blocks_for(u.num_ids), kThreads, 0, stream>>>(ids, u.num_ids, u.rows, bad);
  update_rows<Id><<<blocks_for(u.num_ids * u.dim), kThreads, 0, stream>>>(
      u.kind, u.table, u.state0, u.state1, u.dim, ids, u.num_ids, u.grads, c, bad);
  check(cudaGetLastError(), "kernel launch");
  unsigned long long first_bad = kNoBadId;
  check(cudaMemcpyAsync(&first_bad, bad, sizeof(first_bad), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (first_bad == kNoBadId) return;
  Id value = 0;
  check(cudaMemcpy(&value, ids + first_bad, sizeof(Id), cudaMemcpyDeviceToHost), "cudaMemcpy");
  throw std::invalid_argument("hogwild cuda: ids[" + std::to_string(first_bad) +
                              "] = " + std::to_string(value) + " is out of range [0, " +
                              std::to_string(u.rows) + "); nothing was written");
}

}  // namespace

bool built() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

void sparse_update(const SparseUpdate& u) {
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
  if (u.ids_dtype == DType::kInt64) {
    run<int64_t>(u, c);
  } else if (u.ids_dtype == DType::kInt32) {
    run<int32_t>(u, c);
  } else {
    throw std::invalid_argument(std::string("hogwild cuda: ids are ") + dtype_name(u.ids_dtype) +
                                "; pass int32 or int64");
  }
}

}  // namespace pscore::hogwild::cuda
