// Reads a pscore.buffer.BufferView (a tuple: address, nbytes, numel, dtype_code, device_type,
// device_index, stream, shape, dtype, owner) into pscore::BufferView, so that a binding takes
// `const BufferView&` (or std::optional<BufferView> where Python may pass None). Reading tuple
// slots costs tens of nanoseconds: this is the latency path of every collective. An address of
// None means a non-empty numpy array's, read here from the owner (PyArray_DATA) because numpy
// has no cheap way to say it in Python.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>

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
