#include "gpu/cuda_runtime.h"

#include "common/error.h"
#include "gpu/dynamic_library.h"

namespace pscore::gpu {

namespace {

CudaRuntime bind(const DynamicLibrary& lib) {
  CudaRuntime api;
  api.path = lib.path();
  bind_symbol(lib, api.cudaGetDeviceCount, "cudaGetDeviceCount");
  bind_symbol(lib, api.cudaGetDevice, "cudaGetDevice");
  bind_symbol(lib, api.cudaSetDevice, "cudaSetDevice");
  bind_symbol(lib, api.cudaMalloc, "cudaMalloc");
  bind_symbol(lib, api.cudaFree, "cudaFree");
  bind_symbol(lib, api.cudaHostAlloc, "cudaHostAlloc");
  bind_symbol(lib, api.cudaFreeHost, "cudaFreeHost");
  bind_symbol(lib, api.cudaMemcpyAsync, "cudaMemcpyAsync");
  bind_symbol(lib, api.cudaMemcpy2DAsync, "cudaMemcpy2DAsync");
  bind_symbol(lib, api.cudaStreamSynchronize, "cudaStreamSynchronize");
  bind_symbol(lib, api.cudaStreamQuery, "cudaStreamQuery");
  bind_symbol(lib, api.cudaStreamWaitEvent, "cudaStreamWaitEvent");
  bind_symbol(lib, api.cudaEventCreateWithFlags, "cudaEventCreateWithFlags");
  bind_symbol(lib, api.cudaEventRecord, "cudaEventRecord");
  bind_symbol(lib, api.cudaEventQuery, "cudaEventQuery");
  bind_symbol(lib, api.cudaEventSynchronize, "cudaEventSynchronize");
  bind_symbol(lib, api.cudaEventDestroy, "cudaEventDestroy");
  bind_symbol(lib, api.cudaGetErrorString, "cudaGetErrorString");
  return api;
}

LazyLibrary<CudaRuntime> library("the CUDA runtime (libcudart)",
                                 {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}, bind);

}  // namespace

void CudaRuntime::check(CudaStatus status, const std::string& what) const {
  if (status == kCudaSuccess) return;
  const char* message = cudaGetErrorString(status);
  throw Error(what + ": " + (message ? message : "unknown error") + " (CUDA error " +
              std::to_string(status) + ")");
}

CudaDeviceScope::CudaDeviceScope(const CudaRuntime& cuda, int device, const std::string& what)
    : cuda_(cuda) {
  const std::string prefix = what.empty() ? "" : what + ": ";
  int current = 0;
  cuda.check(cuda.cudaGetDevice(&current), prefix + "cudaGetDevice");
  if (current == device) return;
  cuda.check(cuda.cudaSetDevice(device), prefix + "cudaSetDevice(" + std::to_string(device) + ")");
  previous_ = current;
}

CudaDeviceScope::~CudaDeviceScope() {
  if (previous_ >= 0) cuda_.cudaSetDevice(previous_);
}

void set_cuda_runtime_candidates(std::vector<std::string> paths) {
  library.set_candidates(std::move(paths));
}

const CudaRuntime& cuda_runtime() { return library.get(); }

}  // namespace pscore::gpu
