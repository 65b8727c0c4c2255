#include "common/buffer_view.h"

#include <stdexcept>

namespace pscore {

std::string device_string(const BufferView& b) {
  if (b.on_host()) return "cpu";
  return "cuda:" + std::to_string(b.device_index);
}

void* BufferView::host_data(const char* what) const {
  if (!on_host()) {
    throw std::invalid_argument(std::string(what) + " is on " + device_string(*this) +
                                "; this operation takes host (CPU) memory");
  }
  return data;
}

void* BufferView::cuda_data(const char* what, int index) const {
  if (device != DeviceType::kCuda || (index >= 0 && device_index != index)) {
    const std::string want = index >= 0 ? "cuda:" + std::to_string(index) : "a CUDA device";
    throw std::invalid_argument(std::string(what) + " is on " + device_string(*this) +
                                "; this operation takes " + want);
  }
  return data;
}

}  // namespace pscore
