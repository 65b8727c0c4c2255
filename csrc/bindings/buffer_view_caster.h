// Reads a pscore.buffer.BufferView (a tuple: address, nbytes, numel, dtype_code, device_type,
// device_index, stream, shape, dtype, owner) into pscore::BufferView, so that a binding takes
// `const BufferView&` (or std::optional<BufferView> where Python may pass None). Reading tuple
// slots costs tens of nanoseconds: this is the latency path of every collective. An address of
// None means a non-empty numpy array's, read here from the owner (PyArray_DATA) because numpy
// has no cheap way to say it in Python.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>

#include "common/buffer_view.h"

namespace pybind11::detail {

template <>
struct type_caster<pscore::BufferView> {
  PYBIND11_TYPE_CASTER(pscore::BufferView, const_name("pscore.buffer.BufferView"));

  bool load(handle src, bool) {
    PyObject* t = src.ptr();
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 8) return false;
    auto u64 = [&](Py_ssize_t i) { return PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, i)); };
    auto i64 = [&](Py_ssize_t i) { return PyLong_AsLongLong(PyTuple_GET_ITEM(t, i)); };
    if (!load_address(t)) return false;
    value.nbytes = u64(1);
    value.numel = u64(2);
    const long long dtype = i64(3);
    const long long device = i64(4);
    value.device_index = static_cast<int32_t>(i64(5));
    value.stream = static_cast<uintptr_t>(u64(6));
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    value.dtype = pscore::dtype_from_code(static_cast<int>(dtype));
    if (device != static_cast<int>(pscore::DeviceType::kCpu) &&
        device != static_cast<int>(pscore::DeviceType::kCuda)) {
      return false;
    }
    value.device = static_cast<pscore::DeviceType>(device);
    PyObject* shape = PyTuple_GET_ITEM(t, 7);
    if (!PyTuple_Check(shape)) return false;
    value.shape.resize(static_cast<size_t>(PyTuple_GET_SIZE(shape)));
    for (size_t i = 0; i < value.shape.size(); ++i) {
      value.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, static_cast<Py_ssize_t>(i)));
    }
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    return true;
  }

 private:
  bool load_address(PyObject* t) {
    PyObject* address = PyTuple_GET_ITEM(t, 0);
    if (address != Py_None) {
      value.data =
          reinterpret_cast<void*>(static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(address)));
      return true;
    }
    if (PyTuple_GET_SIZE(t) < 10) return false;
    PyObject* owner = PyTuple_GET_ITEM(t, 9);
    if (!array::check_(owner)) return false;
    value.data = array_proxy(owner)->data;
    return true;
  }
};

}  // namespace pybind11::detail

namespace pscore::bindings {

// A numpy array as a view without a trip through Python: only an array that needs nothing
// explained (a pscore dtype in native byte order, C-contiguous, writable where asked).
inline bool numpy_view(pybind11::handle x, bool writable, BufferView* v) {
  namespace py = pybind11;
  if (!py::array::check_(x)) return false;
  auto a = py::reinterpret_borrow<py::array>(x);
  const int flags = a.flags();
  if (!(flags & py::array::c_style)) return false;
  if (writable && !(flags & py::detail::npy_api::NPY_ARRAY_WRITEABLE_)) return false;
  const py::dtype dt = a.dtype();
  const char order = dt.byteorder();
  if (order == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? '>' : '<')) return false;
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  static const std::pair<std::pair<char, int>, DType> kTypes[] = {
      {{'f', 2}, DType::kFloat16}, {{'f', 4}, DType::kFloat32}, {{'f', 8}, DType::kFloat64},
      {{'i', 1}, DType::kInt8},    {{'u', 1}, DType::kUInt8},   {{'i', 4}, DType::kInt32},
      {{'i', 8}, DType::kInt64}};
  const auto* found = std::find_if(std::begin(kTypes), std::end(kTypes), [&](const auto& t) {
    return t.first.first == kind && t.first.second == size;
  });
  if (found == std::end(kTypes)) return false;
  v->dtype = found->second;
  v->numel = static_cast<uint64_t>(a.size());
  v->nbytes = v->numel * static_cast<uint64_t>(size);
  v->data = v->numel ? const_cast<void*>(a.data()) : nullptr;
  v->device = DeviceType::kCpu;
  v->device_index = 0;
  v->stream = 0;
  v->shape.assign(a.shape(), a.shape() + a.ndim());
  return true;
}

}  // namespace pscore::bindings
