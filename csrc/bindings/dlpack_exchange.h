// Reading a tensor through its framework's DLPack C exchange API (DLPack 1.2+:
// `type.__dlpack_c_exchange_api__`, a capsule "dlpack_exchange_api" holding a DLPackExchangeAPI;
// torch.Tensor has one from torch 2.10). Its dltensor_from_py_object_no_sync fills a borrowed
// DLTensor in one C call (~0.03 us), where reading a tensor's Python attributes costs ~0.25 us.
// The structs below are DLPack's ABI as its specification lays it out; pscore takes no header
// for six fields.
#pragma once

#include <Python.h>

#include <cstdint>

#include "common/buffer_view.h"
#include "common/dtype.h"

namespace pscore::bindings::dlpack {

struct Device {
  int32_t device_type;  // kDLCPU = 1
  int32_t device_id;
};
struct DataType {
  uint8_t code;  // kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; nullptr: compact row-major
  uint64_t byte_offset;
};
struct Version {
  uint32_t major;
  uint32_t minor;
};
struct ExchangeHeader {
  Version version;
  ExchangeHeader* prev_api;
};
// Fills *out, borrowed from py_object (valid while it lives, unchanged); 0, or -1 with a Python
// error set. Called with the GIL held.
using TensorFromObject = int (*)(void* py_object, Tensor* out);
// The producer's current work stream on a device (torch: torch.cuda.current_stream(id)); 0, or
// nonzero with a Python error set.
using CurrentWorkStream = int (*)(int32_t device_type, int32_t device_id, void** out);
struct ExchangeAPI {
  ExchangeHeader header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  TensorFromObject dltensor_from_py_object_no_sync;
  CurrentWorkStream current_work_stream;
};

constexpr int32_t kCpu = 1;
constexpr int32_t kCuda = 2;

// What a framework's exchange API gives pscore: its tensor reader and its stream query.
struct Reader {
  TensorFromObject tensor = nullptr;
  CurrentWorkStream stream = nullptr;
};

// The reader `type` exports; empty when it has none (or one of another major version).
inline Reader tensor_reader(PyObject* type) {
  PyObject* capsule = PyObject_GetAttrString(type, "__dlpack_c_exchange_api__");
  if (capsule == nullptr) {
    PyErr_Clear();
    return {};
  }
  auto* api = static_cast<ExchangeAPI*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
  Py_DECREF(capsule);  // the API is static in the producer, which stays loaded
  if (api == nullptr) {
    PyErr_Clear();
    return {};
  }
  const Version v = api->header.version;
  if (v.major != 1 || v.minor < 2) return {};
  return {api->dltensor_from_py_object_no_sync, api->current_work_stream};
}

// The pscore dtype of a DLPack one; false for the others.
inline bool dtype_of(DataType t, DType* out) {
  if (t.lanes != 1) return false;
  static constexpr struct {
    uint8_t code, bits;
    DType dtype;
  } kTypes[] = {{2, 16, DType::kFloat16}, {4, 16, DType::kBFloat16}, {2, 32, DType::kFloat32},
                {2, 64, DType::kFloat64}, {0, 8, DType::kInt8},      {1, 8, DType::kUInt8},
                {0, 32, DType::kInt32},   {0, 64, DType::kInt64}};
  for (const auto& k : kTypes) {
    if (k.code == t.code && k.bits == t.bits) {
      *out = k.dtype;
      return true;
    }
  }
  return false;
}

// Whether the elements lie row-major without gaps (a dimension of size 1 may have any stride,
// as torch's is_contiguous() has it).
inline bool row_major(const Tensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int32_t i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

// Fills v with x's view through `read` when x is a row-major tensor of a pscore dtype on the CPU,
// or with `cuda` on a CUDA device (ordered on the producer's current stream there); false
// otherwise, with nothing raised.
inline bool tensor_view(const Reader& read, PyObject* x, bool cuda, BufferView* v) {
  Tensor t;
  if (read.tensor(x, &t) != 0) {
    PyErr_Clear();
    return false;
  }
  DType dtype;
  const int32_t device = t.device.device_type;
  const bool on_cuda = device == kCuda && cuda && read.stream != nullptr;
  if ((device != kCpu && !on_cuda) || !dtype_of(t.dtype, &dtype) || !row_major(t)) return false;
  void* stream = nullptr;
  if (on_cuda && read.stream(kCuda, t.device.device_id, &stream) != 0) {
    PyErr_Clear();
    return false;
  }
  uint64_t numel = 1;
  v->shape.assign(t.shape, t.shape + t.ndim);
  for (int64_t n : v->shape) numel *= static_cast<uint64_t>(n);
  v->data = numel ? static_cast<char*>(t.data) + t.byte_offset : nullptr;
  v->dtype = dtype;
  v->numel = numel;
  v->nbytes = numel * dtype_size(dtype);
  v->device = on_cuda ? DeviceType::kCuda : DeviceType::kCpu;
  v->device_index = on_cuda ? t.device.device_id : 0;
  v->stream = reinterpret_cast<uintptr_t>(stream);
  return true;
}

}  // namespace pscore::bindings::dlpack
