// GPU sparse Hogwild updates for float32 tables. Ids are checked before anything is written: by
// every block of the one kernel of a small batch, by a kernel of their own for a large one; a bad
// id stops every update thread before it writes, and the first one reaches the host through a
// mapped pinned word (no copy). The update gives each batch entry a group of lanes
// (sparse_update_body.h) that walks its row, 16 bytes at a time where rows are aligned, so loads
// and stores coalesce and no thread divides a flat index. Colliding rows combine through
// atomicAdd (16-byte vector atomics on sm_90). One stream synchronisation per call.
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
  __device__ Floats<1> operator()(Floats<1>* p, const Floats<1>& v) const {
    return {{atomicAdd(p->f, v.f[0])}};
  }
  __device__ Floats<4> operator()(Floats<4>* p, const Floats<4>& v) const {
#if __CUDA_ARCH__ >= 900  // one 16-byte atomic
    const float4 old =
        atomicAdd(reinterpret_cast<float4*>(p), make_float4(v.f[0], v.f[1], v.f[2], v.f[3]));
    return {{old.x, old.y, old.z, old.w}};
#else
    return {{atomicAdd(p->f, v.f[0]), atomicAdd(p->f + 1, v.f[1]), atomicAdd(p->f + 2, v.f[2]),
             atomicAdd(p->f + 3, v.f[3])}};
#endif
  }
};

// Batches of up to kFusedIds ids run as one kernel in which every block checks all the ids before
// it writes (a few KB read from L2); larger ones check in a kernel of their own first.
constexpr uint64_t kFusedIds = 4096;
// The id check of a large batch leaves (call tag | ~index) in a device word through atomicMax:
// the current call's tag beats older ones, and the smallest bad index the larger ones, so the
// word never needs clearing between calls.
constexpr unsigned kIndexBits = 40;
constexpr unsigned long long kIndexMask = (1ull << kIndexBits) - 1;
constexpr uint32_t kTags = 1u << (64 - kIndexBits);

// Records the smallest bad index of ids in shared memory and returns it (every thread of the
// block), kNoBadId when all are in [0, rows).
template <typename Id>
__device__ unsigned long long first_bad_id(const Id* ids, uint64_t n, uint64_t rows) {
  __shared__ unsigned long long first;
  if (threadIdx.x == 0) first = kNoBadId;
  __syncthreads();
  for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (id_out_of_range(ids[i], rows)) atomicMin(&first, static_cast<unsigned long long>(i));
  }
  __syncthreads();
  return first;
}

// Lane `lane` of every group applies its share of the batch.
template <OptimizerKind K, unsigned V, typename Id>
__device__ void update_batch(const DeviceTable& t, const Id* __restrict__ ids, uint64_t n,
                             const float* __restrict__ grads, const SparseCoefficients& c,
                             unsigned width) {
  const uint64_t thread = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  const uint64_t groups = uint64_t{gridDim.x} * blockDim.x / width;
  const unsigned lane = threadIdx.x % width;
  for (uint64_t i = thread / width; i < n; i += groups) {
    update_entry<K, V>(t, ids, grads, i, lane, width, c, AtomicAdd{});
  }
}

// A small batch: each block checks every id, then updates unless one is bad. Block 0 reports
// the smallest bad index (kNoBadId: none) in host memory.
template <OptimizerKind K, unsigned V, typename Id>
__global__ void check_and_update(DeviceTable t, const Id* __restrict__ ids, uint64_t n,
                                 const float* __restrict__ grads, SparseCoefficients c,
                                 unsigned width, unsigned long long* report) {
  const unsigned long long bad = first_bad_id(ids, n, t.rows);
  if (blockIdx.x == 0 && threadIdx.x == 0) *report = bad;
  if (bad == kNoBadId) update_batch<K, V>(t, ids, n, grads, c, width);
}

template <typename Id>
__global__ void find_bad_id(const Id* ids, uint64_t n, uint64_t rows, unsigned long long* word,
                            unsigned long long tag) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x) {
    if (id_out_of_range(ids[i], rows)) atomicMax(word, tag | (kIndexMask - i));
  }
}

// A large batch after find_bad_id: updates unless the word carries this call's tag; block 0
// reports as check_and_update does.
template <OptimizerKind K, unsigned V, typename Id>
__global__ void update_rows(DeviceTable t, const Id* __restrict__ ids, uint64_t n,
                            const float* __restrict__ grads, SparseCoefficients c, unsigned width,
                            const unsigned long long* word, unsigned long long tag,
                            unsigned long long* report) {
  const unsigned long long seen = *word;
  const bool failed = (seen & ~kIndexMask) == tag;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *report = failed ? kIndexMask - (seen & kIndexMask) : kNoBadId;
  }
  if (!failed) update_batch<K, V>(t, ids, n, grads, c, width);
}

unsigned blocks_for(uint64_t threads) {
  const uint64_t b = (threads + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : b < kMaxBlocks ? b : kMaxBlocks);
}

// One thread's words on one device (calls synchronise before they return, so a thread's calls
// never overlap): the id check's device word, the call tags, and the host word kernels report
// the first bad index in (pinned, mapped into the device's address space).
struct Words {
  unsigned long long* check = nullptr;
  uint32_t tag = 0;
  unsigned long long* report = nullptr;  // host address
  unsigned long long* report_on_device = nullptr;
};

Words& words(cudaStream_t stream) {
  thread_local Words all[64];
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev < 0 || dev >= 64) throw Error("hogwild cuda: device index out of range");
  Words& w = all[dev];
  if (!w.report) {
    check(cudaMalloc(&w.check, sizeof(*w.check)), "cudaMalloc");
    check(cudaMemset(w.check, 0, sizeof(*w.check)), "cudaMemset");
    check(cudaHostAlloc(&w.report, sizeof(*w.report), cudaHostAllocMapped), "cudaHostAlloc");
    check(cudaHostGetDevicePointer(&w.report_on_device, w.report, 0), "cudaHostGetDevicePointer");
  }
  if (++w.tag == kTags) {  // the tags wrap: the word may hold any of them, so clear it
    check(cudaMemsetAsync(w.check, 0, sizeof(*w.check), stream), "cudaMemsetAsync");
    w.tag = 1;
  }
  return w;
}

template <OptimizerKind K, unsigned V, typename Id>
void launch(const DeviceTable& t, const SparseUpdate& u, const SparseCoefficients& c, Words& w,
            cudaStream_t stream) {
  const Id* ids = static_cast<const Id*>(u.ids);
  const unsigned width = lanes_per_entry(u.dim / V);
  const unsigned blocks = blocks_for(u.num_ids * width);
  if (u.num_ids <= kFusedIds) {
    check_and_update<K, V, Id>
        <<<blocks, kThreads, 0, stream>>>(t, ids, u.num_ids, u.grads, c, width, w.report_on_device);
    return;
  }
  const unsigned long long tag = static_cast<unsigned long long>(w.tag) << kIndexBits;
  find_bad_id<Id>
      <<<blocks_for(u.num_ids), kThreads, 0, stream>>>(ids, u.num_ids, u.rows, w.check, tag);
  update_rows<K, V, Id><<<blocks, kThreads, 0, stream>>>(t, ids, u.num_ids, u.grads, c, width,
                                                         w.check, tag, w.report_on_device);
}

template <OptimizerKind K, typename Id>
void launch(const SparseUpdate& u, const SparseCoefficients& c, Words& w, cudaStream_t stream) {
  const DeviceTable t{u.table, u.state0, u.state1, u.rows, u.dim};
  if (vector_width(t, u.grads) == 4) {
    launch<K, 4, Id>(t, u, c, w, stream);
  } else {
    launch<K, 1, Id>(t, u, c, w, stream);
  }
}

template <typename Id>
void run(const SparseUpdate& u, const SparseCoefficients& c) {
  if (u.num_ids > kIndexMask) throw std::invalid_argument("hogwild cuda: too many ids in one call");
  auto stream = static_cast<cudaStream_t>(u.stream);
  Words& w = words(stream);
  if (u.kind == OptimizerKind::kSgd) {
    launch<OptimizerKind::kSgd, Id>(u, c, w, stream);
  } else if (u.kind == OptimizerKind::kAdagrad) {
    launch<OptimizerKind::kAdagrad, Id>(u, c, w, stream);
  } else {
    launch<OptimizerKind::kAdam, Id>(u, c, w, stream);
  }
  check(cudaGetLastError(), "kernel launch");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const unsigned long long first_bad = *static_cast<volatile unsigned long long*>(w.report);
  if (first_bad == kNoBadId) return;
  Id value = 0;
  const Id* ids = static_cast<const Id*>(u.ids);
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
