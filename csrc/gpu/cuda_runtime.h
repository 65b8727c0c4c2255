// The CUDA runtime (libcudart), loaded at run time on first use: the table of the entry points
// pscore calls, with the public runtime API's signatures. pscore is built without CUDA headers
// and imports on machines without CUDA; only code that meets a CUDA buffer loads the runtime.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace pscore::gpu {

using CudaStatus = int;    // cudaError_t
using CudaStream = void*;  // cudaStream_t (0: the legacy default stream)
using CudaEvent = void*;   // cudaEvent_t

inline constexpr CudaStatus kCudaSuccess = 0;
inline constexpr CudaStatus kCudaNotReady = 600;  // cudaErrorNotReady
inline constexpr unsigned kEventDisableTiming = 0x02;
inline constexpr unsigned kHostAllocPortable = 0x01;

// cudaMemcpyKind.
enum class CopyKind : int { kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3 };

struct CudaRuntime {
  std::string path;  // the file it was loaded from
  CudaStatus (*cudaGetDeviceCount)(int* count);
  CudaStatus (*cudaGetDevice)(int* device);
  CudaStatus (*cudaSetDevice)(int device);
  CudaStatus (*cudaMalloc)(void** ptr, size_t bytes);
  CudaStatus (*cudaFree)(void* ptr);
  CudaStatus (*cudaHostAlloc)(void** ptr, size_t bytes, unsigned flags);
  CudaStatus (*cudaFreeHost)(void* ptr);
  CudaStatus (*cudaMemcpyAsync)(void* dst, const void* src, size_t bytes, CopyKind kind,
                                CudaStream stream);
  CudaStatus (*cudaMemcpy2DAsync)(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                                  size_t width, size_t height, CopyKind kind, CudaStream stream);
  CudaStatus (*cudaStreamSynchronize)(CudaStream stream);
  CudaStatus (*cudaStreamQuery)(CudaStream stream);
  CudaStatus (*cudaStreamWaitEvent)(CudaStream stream, CudaEvent event, unsigned flags);
  CudaStatus (*cudaEventCreateWithFlags)(CudaEvent* event, unsigned flags);
  CudaStatus (*cudaEventRecord)(CudaEvent event, CudaStream stream);
  CudaStatus (*cudaEventQuery)(CudaEvent event);
  CudaStatus (*cudaEventSynchronize)(CudaEvent event);
  CudaStatus (*cudaEventDestroy)(CudaEvent event);
  const char* (*cudaGetErrorString)(CudaStatus status);

  // pscore::Error "<what>: <the runtime's message> (CUDA error N)" unless status is success.
  void check(CudaStatus status, const std::string& what) const;
};

// Makes `device` current on this thread for one scope, then restores the caller's device (torch
// keeps its own notion of the current device in the runtime's). Errors start with `what` (none
// when empty).
class CudaDeviceScope {
 public:
  CudaDeviceScope(const CudaRuntime& cuda, int device, const std::string& what);
  ~CudaDeviceScope();
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  const CudaRuntime& cuda_;
  int previous_ = -1;  // the caller's device when it was another; -1: nothing to restore
};

// Where the runtime may be loaded from, in order (paths or sonames); Python sets them
// (pscore/cuda_libraries.py) before the first load. Default: the system's libcudart.so.13/.12.
void set_cuda_runtime_candidates(std::vector<std::string> candidates);

// The runtime, loaded from the first candidate that opens on the first call. pscore::Error
// listing every candidate tried when none loads (then again on each call until the candidates
// change).
const CudaRuntime& cuda_runtime();

}  // namespace pscore::gpu
