// pscore::BufferView: the address is handed out only for the device the operation runs on.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "common/buffer_view.h"

namespace pscore {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(BufferView, HostMemoryIsHandedToHostOperations) {
  float x[4] = {};
  BufferView b;
  b.data = x;
  b.nbytes = sizeof x;
  b.numel = 4;
  b.dtype = DType::kFloat32;
  EXPECT_TRUE(b.on_host());
  EXPECT_EQ(b.host_data("grads"), x);
  EXPECT_EQ(device_string(b), "cpu");
  EXPECT_EQ(error_of([&] { b.cuda_data("grads"); }),
            "grads is on cpu; this operation takes a CUDA device");
}

TEST(BufferView, CudaMemoryNamesItsDeviceWhenMisused) {
  BufferView b;
  b.data = reinterpret_cast<void*>(0x1000);
  b.device = DeviceType::kCuda;
  b.device_index = 1;
  EXPECT_EQ(device_string(b), "cuda:1");
  EXPECT_EQ(b.cuda_data("table"), b.data);
  EXPECT_EQ(b.cuda_data("table", 1), b.data);
  EXPECT_EQ(error_of([&] { b.host_data("tensor"); }),
            "tensor is on cuda:1; this operation takes host (CPU) memory");
  EXPECT_EQ(error_of([&] { b.cuda_data("ids", 0); }),
            "ids is on cuda:1; this operation takes cuda:0");
}

}  // namespace
}  // namespace pscore
