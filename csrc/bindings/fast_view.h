// pscore._C.fast_view(x, writable): the pscore.buffer.BufferView of a numpy array or a CPU torch
// tensor, built here in a fraction of what Python takes (reading a tensor's attributes and making
// the NamedTuple cost ~1 us a collective), or None when x needs something explained (pscore.buffer
// then raises the error naming it) or is anything else. A METH_FASTCALL function, not a pybind11
// one: no dispatcher on the latency path of every collective.
//
// pscore is not built against libtorch: a tensor is read through its Python attributes, as
// pscore.buffer reads it, with torch.Tensor, torch.strided and the torch dtypes handed over once
// by pscore.buffer (_C.fast_view_torch) the first time it meets a tensor.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>

#include "bindings/buffer_view_caster.h"
#include "common/buffer_view.h"
#include "common/dtype.h"

namespace pscore::bindings {

namespace fast_view_detail {

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

constexpr size_t kDTypes = 8;

// The dtype's name as Python writes it (pscore.buffer's names: dtype.h's), interned once.
inline PyObject* dtype_name_object(DType dtype) {
  static std::array<PyObject*, kDTypes> names{};
  PyObject*& name = names.at(static_cast<size_t>(dtype));
  if (name == nullptr) name = PyUnicode_InternFromString(dtype_name(dtype));
  return name;
}

inline PyObject* new_ref(PyObject* o) {
  Py_XINCREF(o);
  return o;
}

// A BufferView (address, nbytes, numel, dtype_code, device_type, device_index, stream, shape,
// dtype, owner) of CPU memory. Takes the references to address, nbytes and shape (any of them
// nullptr after a failed allocation: then this fails too).
inline PyObject* make_view(PyObject* address, PyObject* nbytes, uint64_t numel, DType dtype,
                           PyObject* shape, PyObject* owner) {
  PyTypeObject* type = buffer_view_type();
  PyObject* fields[] = {
      address,
      nbytes,
      PyLong_FromUnsignedLongLong(numel),
      PyLong_FromLong(static_cast<long>(dtype)),
      PyLong_FromLong(static_cast<long>(DeviceType::kCpu)),
      PyLong_FromLong(0),
      PyLong_FromLong(0),
      shape,
      new_ref(dtype_name_object(dtype)),
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

// ---- numpy ----------------------------------------------------------------------------------
// The address is None for the caster to read from the owner (PyArray_DATA), 0 when empty.
inline PyObject* numpy_fast_view(const BufferView& v, PyObject* array) {
  PyObject* shape = PyTuple_New(static_cast<Py_ssize_t>(v.shape.size()));
  if (shape == nullptr) return nullptr;
  for (size_t i = 0; i < v.shape.size(); ++i) {
    PyObject* n = PyLong_FromLongLong(v.shape[i]);
    if (n == nullptr) return Py_DECREF(shape), nullptr;
    PyTuple_SET_ITEM(shape, static_cast<Py_ssize_t>(i), n);
  }
  PyObject* address = v.numel ? new_ref(Py_None) : PyLong_FromLong(0);
  return make_view(address, PyLong_FromUnsignedLongLong(v.nbytes), v.numel, v.dtype, shape, array);
}

// ---- torch ----------------------------------------------------------------------------------
// What pscore.buffer handed over (strong references, kept for the process's life) and the
// interned names of the attributes read. Constant-initialised: no guard.
struct Torch {
  PyTypeObject* tensor = nullptr;
  PyObject* strided = nullptr;
  std::array<PyObject*, kDTypes> dtypes{};  // by DType code
  PyObject* dtype = nullptr;
  PyObject* layout = nullptr;
  PyObject* is_cpu = nullptr;
  PyObject* is_contiguous = nullptr;
  PyObject* data_ptr = nullptr;
  PyObject* shape = nullptr;
};
inline Torch torch_types;

using Ref = pybind11::object;
inline Ref steal(PyObject* o) { return pybind11::reinterpret_steal<Ref>(o); }
inline Ref attr(PyObject* x, PyObject* name) { return steal(PyObject_GetAttr(x, name)); }
inline Ref call(PyObject* x, PyObject* method) {
  return steal(PyObject_VectorcallMethod(method, &x, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
}

// None (a new reference) for pscore.buffer to read x again and say what is wrong, clearing what
// reading x raised.
inline PyObject* left_to_python() {
  PyErr_Clear();
  Py_RETURN_NONE;
}

// The number of elements of a tensor of shape `sizes` (a torch.Size); -1 (an error set) when
// an entry is not an int.
inline long long numel_of(PyObject* sizes) {
  long long numel = 1;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sizes); ++i) {
    const long long n = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes, i));
    if (n == -1 && PyErr_Occurred()) return -1;
    numel *= n;
  }
  return numel;
}

// Tensor x's view when it is strided, on the CPU, contiguous and of a pscore dtype; None
// otherwise. The address is data_ptr(), 0 when x is empty, as pscore.buffer writes it.
inline PyObject* tensor_fast_view(PyObject* x) {
  const Ref dtype_object = attr(x, torch_types.dtype);
  size_t code = 0;
  while (code < kDTypes && torch_types.dtypes[code] != dtype_object.ptr()) ++code;
  if (code == kDTypes) return left_to_python();
  if (attr(x, torch_types.layout).ptr() != torch_types.strided) return left_to_python();
  if (attr(x, torch_types.is_cpu).ptr() != Py_True) return left_to_python();
  if (call(x, torch_types.is_contiguous).ptr() != Py_True) return left_to_python();
  const Ref sizes = attr(x, torch_types.shape);
  if (!sizes || !PyTuple_Check(sizes.ptr())) return left_to_python();
  const long long numel = numel_of(sizes.ptr());
  if (numel < 0) return left_to_python();
  Ref address = numel ? call(x, torch_types.data_ptr) : steal(PyLong_FromLong(0));
  if (!address) return left_to_python();
  PyObject* shape = PyTuple_GetSlice(sizes.ptr(), 0, PY_SSIZE_T_MAX);  // torch.Size -> tuple
  const auto dtype = static_cast<DType>(code);
  const auto n = static_cast<uint64_t>(numel);
  return make_view(address.release().ptr(), PyLong_FromUnsignedLongLong(n * dtype_size(dtype)), n,
                   dtype, shape, x);
}

inline PyObject* fast_view_call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "fast_view(x, writable) takes 2 arguments");
    return nullptr;
  }
  PyObject* x = args[0];
  try {  // no C++ exception may leave a C API function
    if (torch_types.tensor != nullptr && PyObject_TypeCheck(x, torch_types.tensor))
      return tensor_fast_view(x);
    const int writable = PyObject_IsTrue(args[1]);
    if (writable < 0) return nullptr;
    BufferView v;
    if (!numpy_view(x, writable == 1, &v)) Py_RETURN_NONE;
    return numpy_fast_view(v, x);
  } catch (pybind11::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// fast_view_torch(tensor_type, strided, dtypes): dtypes maps each torch dtype pscore takes to
// its pscore dtype code.
inline void take_torch(pybind11::type tensor, pybind11::object strided, pybind11::dict dtypes) {
  for (auto [dtype, code] : dtypes) {
    torch_types.dtypes.at(static_cast<size_t>(code.cast<int>())) = dtype.inc_ref().ptr();
  }
  torch_types.strided = strided.release().ptr();
  for (auto [name, slot] : {std::pair{"dtype", &torch_types.dtype},
                            {"layout", &torch_types.layout},
                            {"is_cpu", &torch_types.is_cpu},
                            {"is_contiguous", &torch_types.is_contiguous},
                            {"data_ptr", &torch_types.data_ptr},
                            {"shape", &torch_types.shape}}) {
    *slot = PyUnicode_InternFromString(name);
    if (*slot == nullptr) throw pybind11::error_already_set();
  }
  torch_types.tensor = reinterpret_cast<PyTypeObject*>(tensor.release().ptr());  // last: now in use
}

}  // namespace fast_view_detail

// Adds fast_view and fast_view_torch to module m.
inline void bind_fast_view(pybind11::module_& m) {
  static PyMethodDef def = {
      "fast_view", reinterpret_cast<PyCFunction>(fast_view_detail::fast_view_call), METH_FASTCALL,
      "fast_view($module, x, writable, /)\n--\n\nThe pscore.buffer.BufferView of numpy array "
      "or CPU torch tensor x, in place; None when pscore.buffer must explain what is wrong with "
      "x, or x is neither (or a tensor before fast_view_torch)."};
  PyObject* function = PyCFunction_NewEx(&def, m.ptr(), m.attr("__name__").ptr());
  if (function == nullptr) throw pybind11::error_already_set();
  m.add_object("fast_view", pybind11::reinterpret_steal<pybind11::object>(function));
  m.def("fast_view_torch", &fast_view_detail::take_torch, pybind11::arg("tensor_type"),
        pybind11::arg("strided"), pybind11::arg("dtypes"),
        "Hands fast_view torch.Tensor, torch.strided and {torch dtype: pscore dtype code}.");
}

}  // namespace pscore::bindings
