// pscore._C.fast_view(x, writable): the pscore.buffer.BufferView of a numpy array or a torch
// tensor (CUDA ones where torch has the DLPack exchange API), built here in a fraction of what
// Python takes (reading a tensor's attributes and making the NamedTuple cost ~1 us a collective),
// or None when x needs something explained (pscore.buffer then raises the error naming it) or is
// anything else. A METH_FASTCALL function, not a pybind11 one: no dispatcher on the latency path of
// every collective.
//
// pscore is not built against libtorch: a tensor is read through torch's DLPack C exchange API
// where torch has one (dlpack_exchange.h, one C call), else through its Python attributes, as
// pscore.buffer reads it, with torch.Tensor (and its descriptors), torch.strided and the torch
// dtypes handed over once by pscore.buffer (_C.fast_view_torch) the first time it meets a
// tensor. Through the attributes ~0.4 us a tensor against ~0.8 us in pscore.buffer._tensor; a
// numpy array ~0.15 us.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

#include "bindings/buffer_view_caster.h"
#include "bindings/dlpack_exchange.h"
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

// Where a view's memory is: the device, and the stream work on it is ordered on.
struct Place {
  DeviceType device = DeviceType::kCpu;
  int32_t index = 0;
  uintptr_t stream = 0;
};

// A BufferView (address, nbytes, numel, dtype_code, device_type, device_index, stream, shape,
// dtype, owner). Takes the references to address, nbytes and shape (any of them nullptr after a
// failed allocation: then this fails too).
inline PyObject* make_view(PyObject* address, PyObject* nbytes, uint64_t numel, DType dtype,
                           PyObject* shape, PyObject* owner, Place place = {}) {
  PyTypeObject* type = buffer_view_type();
  PyObject* fields[] = {
      address,
      nbytes,
      PyLong_FromUnsignedLongLong(numel),
      PyLong_FromLong(static_cast<long>(dtype)),
      PyLong_FromLong(static_cast<long>(place.device)),
      PyLong_FromLong(place.index),
      PyLong_FromSize_t(place.stream),
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

// A shape as a tuple of ints (nullptr after a failed allocation).
inline PyObject* shape_tuple(const std::vector<int64_t>& shape) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(shape.size()));
  for (size_t i = 0; t != nullptr && i < shape.size(); ++i) {
    PyObject* n = PyLong_FromLongLong(shape[i]);
    if (n == nullptr) {
      Py_CLEAR(t);
    } else {
      PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), n);
    }
  }
  return t;
}

// ---- numpy ----------------------------------------------------------------------------------
// The address is None for the caster to read from the owner (PyArray_DATA), 0 when empty.
inline PyObject* numpy_fast_view(const BufferView& v, PyObject* array) {
  PyObject* address = v.numel ? new_ref(Py_None) : PyLong_FromLong(0);
  return make_view(address, PyLong_FromUnsignedLongLong(v.nbytes), v.numel, v.dtype,
                   shape_tuple(v.shape), array);
}

// ---- torch ----------------------------------------------------------------------------------
// An attribute fast_view reads: its interned name and torch.Tensor's descriptor for it.
struct Attribute {
  PyObject* name = nullptr;
  PyObject* descriptor = nullptr;
};

// A tensor type whose attributes are torch.Tensor's descriptors (torch.Tensor itself, and
// torch.nn.Parameter, which overrides none of them) as long as its version tag is `version`:
// CPython gives a type a new one when it or a base is changed.
struct PlainType {
  PyTypeObject* type = nullptr;
  unsigned int version = 0;
};

// What pscore.buffer handed over (strong references, kept for the process's life) and the
// attributes read. Constant-initialised: no guard.
struct Torch {
  PyTypeObject* tensor = nullptr;
  std::array<PlainType, 2> plain{};
  PyObject* strided = nullptr;
  std::array<PyObject*, kDTypes> dtypes{};  // by DType code
  Attribute dtype, layout, is_cpu, is_contiguous, data_ptr, shape;
  dlpack::Reader dlpack;  // torch.Tensor's DLPack exchange API, if it has one
};
inline Torch torch_types;

// Whether x's type is a plain one, unchanged: its descriptors are called without a lookup in
// the type (~15 ns each, 0.08 us a view, measured). An instance attribute shadowing a method
// (t.data_ptr = ...) is not seen on this path.
inline bool plain(PyObject* x) {
  const PyTypeObject* type = Py_TYPE(x);
  for (const PlainType& p : torch_types.plain) {
    if (type == p.type) return p.version != 0 && type->tp_version_tag == p.version;
  }
  return false;
}

using Ref = pybind11::object;
inline Ref steal(PyObject* o) { return pybind11::reinterpret_steal<Ref>(o); }

// x.<a>, through the descriptor where x's type is plain.
inline Ref get(PyObject* x, const Attribute& a, bool plain) {
  if (!plain) return steal(PyObject_GetAttr(x, a.name));
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(x));
  return steal(Py_TYPE(a.descriptor)->tp_descr_get(a.descriptor, x, type));
}

// x.<m>(), through the descriptor where x's type is plain.
inline Ref call(PyObject* x, const Attribute& m, bool plain) {
  if (!plain) {
    return steal(
        PyObject_VectorcallMethod(m.name, &x, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr));
  }
  return steal(PyObject_Vectorcall(m.descriptor, &x, 1, nullptr));
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

// Fills v from tensor x's attributes when x is strided, on the CPU, contiguous and of a pscore
// dtype; false otherwise, with nothing raised.
inline bool read_attributes(PyObject* x, bool known, BufferView* v) {
  const Ref dtype_object = get(x, torch_types.dtype, known);
  size_t code = 0;
  while (code < kDTypes && torch_types.dtypes[code] != dtype_object.ptr()) ++code;
  const Ref sizes = code == kDTypes ||
                            get(x, torch_types.layout, known).ptr() != torch_types.strided ||
                            get(x, torch_types.is_cpu, known).ptr() != Py_True ||
                            call(x, torch_types.is_contiguous, known).ptr() != Py_True
                        ? Ref()
                        : get(x, torch_types.shape, known);
  const long long numel = sizes && PyTuple_Check(sizes.ptr()) ? numel_of(sizes.ptr()) : -1;
  const Ref address = numel > 0 ? call(x, torch_types.data_ptr, known) : Ref();
  if (numel < 0 || (numel > 0 && !address)) {
    PyErr_Clear();
    return false;
  }
  v->shape.resize(static_cast<size_t>(PyTuple_GET_SIZE(sizes.ptr())));
  for (size_t i = 0; i < v->shape.size(); ++i)
    v->shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes.ptr(), static_cast<Py_ssize_t>(i)));
  v->data = numel ? PyLong_AsVoidPtr(address.ptr()) : nullptr;
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  v->dtype = static_cast<DType>(code);
  v->numel = static_cast<uint64_t>(numel);
  v->nbytes = v->numel * dtype_size(v->dtype);
  v->device = DeviceType::kCpu;
  v->device_index = 0;
  v->stream = 0;
  return true;
}

// Fills v with tensor x's view when x is strided, contiguous, of a pscore dtype and on the CPU
// (or, with `cuda`, a CUDA device); false otherwise, with nothing raised. A plain tensor is read
// in one call through torch's DLPack C exchange API where torch has one (dlpack_exchange.h; CUDA
// tensors only there), anything else through its attributes.
inline bool read_tensor(PyObject* x, bool cuda, BufferView* v) {
  const bool known = plain(x);
  if (known && torch_types.dlpack.tensor != nullptr)
    return dlpack::tensor_view(torch_types.dlpack, x, cuda, v);
  return read_attributes(x, known, v);
}

// Tensor x's view (CPU or CUDA) when read_tensor takes it; None otherwise.
inline PyObject* tensor_fast_view(PyObject* x) {
  BufferView v;
  if (!read_tensor(x, true, &v)) Py_RETURN_NONE;
  return make_view(PyLong_FromVoidPtr(v.data), PyLong_FromUnsignedLongLong(v.nbytes), v.numel,
                   v.dtype, shape_tuple(v.shape), x, {v.device, v.device_index, v.stream});
}

// The C++ view of x when it is a CPU torch tensor read_tensor takes (once pscore.buffer has
// handed torch over); false otherwise, with nothing raised. No Python object is made.
inline bool tensor_host_view(PyObject* x, BufferView* v) {
  return torch_types.tensor != nullptr && PyObject_TypeCheck(x, torch_types.tensor) &&
         read_tensor(x, false, v);
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

// Whether type's descriptors for the attributes read are torch.Tensor's, each with a getter.
inline bool has_tensor_descriptors(PyObject* type) {
  for (const Attribute* a :
       {&torch_types.dtype, &torch_types.layout, &torch_types.is_cpu, &torch_types.is_contiguous,
        &torch_types.data_ptr, &torch_types.shape}) {
    const Ref descriptor = steal(PyObject_GetAttr(type, a->name));
    if (descriptor.ptr() != a->descriptor || Py_TYPE(a->descriptor)->tp_descr_get == nullptr) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

// fast_view_torch(tensor_type, plain_types, strided, dtypes): dtypes maps each torch dtype
// pscore takes to its pscore dtype code; plain_types are torch.Tensor and subclasses of it that
// override none of the attributes read.
inline void take_torch(pybind11::type tensor, pybind11::tuple plain_types, pybind11::object strided,
                       pybind11::dict dtypes) {
  namespace py = pybind11;
  for (auto [dtype, code] : dtypes) {
    torch_types.dtypes.at(static_cast<size_t>(code.cast<int>())) = dtype.inc_ref().ptr();
  }
  torch_types.strided = strided.release().ptr();
  for (auto [name, a] : {std::pair{"dtype", &torch_types.dtype},
                         {"layout", &torch_types.layout},
                         {"is_cpu", &torch_types.is_cpu},
                         {"is_contiguous", &torch_types.is_contiguous},
                         {"data_ptr", &torch_types.data_ptr},
                         {"shape", &torch_types.shape}}) {
    a->name = PyUnicode_InternFromString(name);
    if (a->name == nullptr) throw py::error_already_set();
    a->descriptor = PyObject_GetAttr(tensor.ptr(), a->name);
    if (a->descriptor == nullptr) throw py::error_already_set();
  }
  if (plain_types.size() > torch_types.plain.size()) throw py::value_error("too many plain types");
  for (size_t i = 0; i < plain_types.size(); ++i) {
    PyObject* type = plain_types[i].ptr();
    if (!PyType_Check(type) || !has_tensor_descriptors(type)) continue;
    // looked up just now: the type has its version tag (0: none to be had)
    torch_types.plain[i] = {reinterpret_cast<PyTypeObject*>(py::handle(type).inc_ref().ptr()),
                            reinterpret_cast<PyTypeObject*>(type)->tp_version_tag};
  }
  torch_types.dlpack = dlpack::tensor_reader(tensor.ptr());
  torch_types.tensor = reinterpret_cast<PyTypeObject*>(tensor.release().ptr());  // last: now in use
}

}  // namespace fast_view_detail

// Adds fast_view and fast_view_torch to module m.
inline void bind_fast_view(pybind11::module_& m) {
  static PyMethodDef def = {
      "fast_view", reinterpret_cast<PyCFunction>(fast_view_detail::fast_view_call), METH_FASTCALL,
      "fast_view($module, x, writable, /)\n--\n\nThe pscore.buffer.BufferView of numpy array "
      "or torch tensor x, in place; None when pscore.buffer must explain what is wrong with "
      "x, or x is neither (or a tensor before fast_view_torch)."};
  PyObject* function = PyCFunction_NewEx(&def, m.ptr(), m.attr("__name__").ptr());
  if (function == nullptr) throw pybind11::error_already_set();
  m.add_object("fast_view", pybind11::reinterpret_steal<pybind11::object>(function));
  m.def("fast_view_torch", &fast_view_detail::take_torch, pybind11::arg("tensor_type"),
        pybind11::arg("plain_types"), pybind11::arg("strided"), pybind11::arg("dtypes"),
        "Hands fast_view torch.Tensor, the plain tensor types, torch.strided and {torch dtype: "
        "pscore dtype code}.");
}

}  // namespace pscore::bindings
