// GPU sparse Hogwild updates for float32 tables. Ids are checked first by their own kernel; a
// bad id stops every update thread before it writes. The update kernel gives each batch entry a
// group of lanes (sparse_update_body.h) that walks its row, so loads and stores coalesce and no
// thread divides a flat index. Colliding rows combine through atomicAdd.
#include <cuda_runtime.h>

#include <climits>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "hogwild/cuda/launch.h"
#include "hogwild/cuda/sparse_update_body.h"

namespace pscore::hogwild::cuda {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocks = 65535u * 8;
constexpr unsigned long long kNoBadId = ULLONG_MAX;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw Error(std::string("hogwild cuda: ") + what + ": " + cudaGetErrorString(err));
  }
}

struct AtomicAdd {
  __device__ float operator()(float* p, float v) const { return atomicAdd(p, v); }
};

// Records the smallest index whose id is outside [0, rows).
template <typename Id>
__global__ void find_bad_id(const Id* ids, uint64_t n, uint64_t rows, unsigned long long* bad) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x) {
    if (id_out_of_range(ids[i], rows)) atomicMin(bad, i);
  }
}

template <OptimizerKind K, typename Id>
__global__ void update_rows(DeviceTable t, const Id* __restrict__ ids, uint64_t n,
                            const float* __restrict__ grads, SparseCoefficients c, unsigned width,
                            const unsigned long long* bad) {
  if (*bad != kNoBadId) return;
  const uint64_t thread = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  const uint64_t groups = uint64_t{gridDim.x} * blockDim.x / width;
  const unsigned lane = threadIdx.x % width;
  for (uint64_t i = thread / width; i < n; i += groups) {
    update_entry<K>(t, ids, grads, i, lane, width, c, AtomicAdd{});
  }
}

unsigned blocks_for(uint64_t threads) {
  const uint64_t b = (threads + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : b < kMaxBlocks ? b : kMaxBlocks);
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

template <OptimizerKind K, typename Id>
void launch_update(const SparseUpdate& u, const SparseCoefficients& c,
                   const unsigned long long* bad, cudaStream_t stream) {
  const DeviceTable t{u.table, u.state0, u.state1, u.rows, u.dim};
  const unsigned width = lanes_per_entry(u.dim);
  update_rows<K, Id><<<blocks_for(u.num_ids * width), kThreads, 0, stream>>>(
      t, static_cast<const Id*>(u.ids), u.num_ids, u.grads, c, width, bad);
}

template <typename Id>
void run(const SparseUpdate& u, const SparseCoefficients& c) {
  auto stream = static_cast<cudaStream_t>(u.stream);
  const Id* ids = static_cast<const Id*>(u.ids);
  unsigned long long* bad = scratch_word();
  check(cudaMemsetAsync(bad, 0xff, sizeof(*bad), stream), "cudaMemsetAsync");
  find_bad_id<Id><<<blocks_for(u.num_ids), kThreads, 0, stream>>>(ids, u.num_ids, u.rows, bad);
  if (u.kind == OptimizerKind::kSgd) {
    launch_update<OptimizerKind::kSgd, Id>(u, c, bad, stream);
  } else if (u.kind == OptimizerKind::kAdagrad) {
    launch_update<OptimizerKind::kAdagrad, Id>(u, c, bad, stream);
  } else {
    launch_update<OptimizerKind::kAdam, Id>(u, c, bad, stream);
  }
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

double peak_memory_bandwidth(int device) {
  int khz = 0, bus_bits = 0;
  check(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device), "memory clock");
  check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device), "bus width");
  return 2.0 * khz * 1e3 * bus_bits / 8;
}

void launch_sparse_update(const SparseUpdate& u, const SparseCoefficients& c) {
  if (u.ids_dtype == DType::kInt64) {
    run<int64_t>(u, c);
  } else {
    run<int32_t>(u, c);
  }
}

}  // namespace pscore::hogwild::cuda
