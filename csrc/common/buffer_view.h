// The one view of a caller's buffer that crosses into C++: address, size, element type, shape,
// device and stream. Python builds it (pscore/buffer.py) from numpy arrays, torch tensors and
// __dlpack__ objects, and bindings/buffer_view_caster.h reads it; the collectives' latency path
// reads numpy arrays and CPU tensors straight into it (bindings/user_buffer.h). Nothing here
// knows torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace pscore {

// DLPack's DLDeviceType codes for the devices pscore reads.
enum class DeviceType : int32_t { kCpu = 1, kCuda = 2 };

struct BufferView {
  void* data = nullptr;  // nullptr for an empty buffer
  uint64_t nbytes = 0;
  uint64_t numel = 0;
  DType dtype = DType::kUInt8;
  DeviceType device = DeviceType::kCpu;
  int32_t device_index = 0;
  uintptr_t stream = 0;        // the cudaStream_t work on a CUDA buffer is ordered on (0: default)
  std::vector<int64_t> shape;  // C-contiguous: the strides follow from it

  bool on_host() const { return device == DeviceType::kCpu; }
  // data, after checking the buffer is in host memory (std::invalid_argument naming `what`).
  void* host_data(const char* what) const;
  // data, after checking the buffer is on CUDA device `index` (-1: any).
  void* cuda_data(const char* what, int index = -1) const;
};

// "cpu" or "cuda:<index>".
std::string device_string(const BufferView& b);

}  // namespace pscore
