// What the GPU layer's tests share over the fakes of tests/fakes/ (whose paths
// tests/cpp/CMakeLists.txt passes as PSCORE_FAKE_CUDART and PSCORE_FAKE_NCCL): the fakes' test
// switches and CUDA views of host vectors (the fakes' "device" memory is host memory).
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <vector>

#include "common/buffer_view.h"

namespace pscore::gpu {

// A fake's exported function `name`, through the handle the core loaded (dlopen of the same
// path); null when the core has not loaded that library yet.
template <typename Fn>
Fn* fake_switch(const char* path, const char* name) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  return lib ? reinterpret_cast<Fn*>(dlsym(lib, name)) : nullptr;
}

// `values` as a float32 buffer of CUDA device `device`, ordered on `stream`.
inline BufferView cuda_view(std::vector<float>& values, uintptr_t stream, int device = 0) {
  BufferView b;
  b.data = values.data();
  b.nbytes = values.size() * sizeof(float);
  b.numel = values.size();
  b.dtype = DType::kFloat32;
  b.device = DeviceType::kCuda;
  b.device_index = device;
  b.stream = stream;
  b.shape = {static_cast<int64_t>(values.size())};
  return b;
}

}  // namespace pscore::gpu
