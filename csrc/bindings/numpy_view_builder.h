// pscore._C.numpy_view(x, writable): the pscore.buffer.BufferView of numpy array x, built here
// in a fraction of what Python takes (reading numpy's attributes and making the NamedTuple cost
// ~0.4 us a collective), or None when x needs something explained (pscore.buffer then raises the
// error naming it). A METH_FASTCALL function, not a pybind11 one: no dispatcher on the latency
// path of every collective.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstddef>
#include <exception>

#include "bindings/buffer_view_caster.h"
#include "common/buffer_view.h"

namespace pscore::bindings {

namespace numpy_view_detail {

// pscore.buffer.BufferView, looked up on the first call (pscore.buffer imports this module), under
// the GIL: no static-initialisation guard that a second thread could wait on holding the GIL.
inline PyTypeObject* buffer_view_type() {
  static PyObject* type = nullptr;
  if (type == nullptr) {
    type = pybind11::module_::import("pscore.buffer")
               .attr("BufferView")
               .cast<pybind11::object>()
               .release()
               .ptr();
  }
  return reinterpret_cast<PyTypeObject*>(type);
}

// The dtype's name as Python writes it (pscore.buffer's names: dtype.h's), interned once.
inline PyObject* dtype_name_object(DType dtype) {
  static std::array<PyObject*, 8> names{};
  PyObject*& name = names.at(static_cast<size_t>(dtype));
  if (name == nullptr) name = PyUnicode_InternFromString(dtype_name(dtype));
  return name;
}

inline PyObject* new_ref(PyObject* o) {
  Py_XINCREF(o);
  return o;
}

// (address, nbytes, numel, dtype_code, device_type, device_index, stream, shape, dtype, owner),
// the fields of pscore.buffer.BufferView; the address None for the caster to read from the owner.
inline PyObject* make_view(const BufferView& v, PyObject* owner) {
  PyTypeObject* type = buffer_view_type();
  PyObject* shape = PyTuple_New(static_cast<Py_ssize_t>(v.shape.size()));
  if (shape == nullptr) return nullptr;
  for (size_t i = 0; i < v.shape.size(); ++i) {
    PyObject* n = PyLong_FromLongLong(v.shape[i]);
    if (n == nullptr) return Py_DECREF(shape), nullptr;
    PyTuple_SET_ITEM(shape, static_cast<Py_ssize_t>(i), n);
  }
  PyObject* fields[] = {
      v.numel ? new_ref(Py_None) : PyLong_FromLong(0),
      PyLong_FromUnsignedLongLong(v.nbytes),
      PyLong_FromUnsignedLongLong(v.numel),
      PyLong_FromLong(static_cast<long>(v.dtype)),
      PyLong_FromLong(static_cast<long>(DeviceType::kCpu)),
      PyLong_FromLong(0),
      PyLong_FromLong(0),
      shape,
      new_ref(dtype_name_object(v.dtype)),
      new_ref(owner),
  };
  constexpr Py_ssize_t kFields = sizeof(fields) / sizeof(fields[0]);
  PyObject* view = type->tp_alloc(type, kFields);
  for (Py_ssize_t i = 0; i < kFields; ++i) {
    if (view == nullptr || fields[i] == nullptr) {
      for (PyObject* f : fields) Py_XDECREF(f);
      Py_XDECREF(view);
      return nullptr;
    }
  }
  for (Py_ssize_t i = 0; i < kFields; ++i) PyTuple_SET_ITEM(view, i, fields[i]);
  return view;
}

inline PyObject* numpy_view_call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "numpy_view(x, writable) takes 2 arguments");
    return nullptr;
  }
  const int writable = PyObject_IsTrue(args[1]);
  if (writable < 0) return nullptr;
  try {  // no C++ exception may leave a C API function
    BufferView v;
    if (!numpy_view(args[0], writable == 1, &v)) Py_RETURN_NONE;
    return make_view(v, args[0]);
  } catch (pybind11::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

}  // namespace numpy_view_detail

// Adds numpy_view to module m.
inline void bind_numpy_view(pybind11::module_& m) {
  static PyMethodDef def = {
      "numpy_view", reinterpret_cast<PyCFunction>(numpy_view_detail::numpy_view_call),
      METH_FASTCALL,
      "numpy_view($module, x, writable, /)\n--\n\nThe pscore.buffer.BufferView of numpy "
      "array x, in place; None when pscore.buffer must explain what is wrong with x."};
  PyObject* function = PyCFunction_NewEx(&def, m.ptr(), m.attr("__name__").ptr());
  if (function == nullptr) throw pybind11::error_already_set();
  m.add_object("numpy_view", pybind11::reinterpret_steal<pybind11::object>(function));
}

}  // namespace pscore::bindings
