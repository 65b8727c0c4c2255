// Buffers as the caller passed them (numpy arrays, torch tensors, __dlpack__ objects or
// pscore.buffer.BufferViews), for bindings on the latency path: a numpy array or a CPU torch
// tensor is read here without a Python view being made (fast_view.h), so a collective on one
// costs one call into C++ from its Python function.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "bindings/buffer_view_caster.h"
#include "bindings/fast_view.h"
#include "common/buffer_view.h"

namespace pscore::bindings {

// The view of x. Anything numpy_view and tensor_host_view do not take (CUDA tensors, __dlpack__
// objects, buffers with something to explain) goes through pscore.buffer.view, which makes the
// view or raises the error naming `what`; `host` is view()'s host argument (nullptr: None, CUDA
// memory too). The memory stays x's, and x lives through the call: the view may go when this
// returns. `index` >= 0: x is entry `index` of the list `what` (named "what[index]").
inline BufferView to_view(pybind11::handle x, const char* what, bool writable, const char* host,
                          Py_ssize_t index = -1) {
  namespace py = pybind11;
  BufferView v;
  if (fast_view_detail::tensor_host_view(x.ptr(), &v) || numpy_view(x, writable, &v)) return v;
  py::detail::make_caster<BufferView> caster;
  if (caster.load(x, false)) return py::detail::cast_op<BufferView>(caster);
  static const auto* view = new py::object(py::module_::import("pscore.buffer").attr("view"));
  using namespace py::literals;
  const std::string name = index < 0 ? what : std::string(what) + "[" + std::to_string(index) + "]";
  py::object made = (*view)(x, "writable"_a = writable, "what"_a = name.c_str(), "host"_a = host);
  if (!caster.load(made, false)) throw py::type_error("pscore.buffer.view made no BufferView");
  return py::detail::cast_op<BufferView>(caster);
}

// How a buffer argument is named in errors, and whether the call writes into it.
struct BufferRole {
  const char* what;
  bool writable;
};
inline constexpr BufferRole kTensorArg{"tensor", true};
inline constexpr BufferRole kReadTensorArg{"tensor", false};
inline constexpr BufferRole kInputArg{"input", false};
inline constexpr BufferRole kOutputArg{"output", true};
// The list arguments of torch.distributed's names.
inline constexpr BufferRole kTensorListArg{"tensor_list", true};
inline constexpr BufferRole kInputListArg{"input_list", false};
inline constexpr BufferRole kGatherListArg{"gather_list", true};
inline constexpr BufferRole kScatterListArg{"scatter_list", false};
inline constexpr BufferRole kOutputTensorListArg{"output_tensor_list", true};
inline constexpr BufferRole kInputTensorListArg{"input_tensor_list", false};

// A binding argument read by to_view (host or CUDA memory) in the role `Role`.
template <const BufferRole& Role>
struct UserBuffer {
  BufferView view;
};

// A list (or tuple) of such arguments, or None (`given` false, no views).
template <const BufferRole& Role>
struct UserBuffers {
  std::vector<BufferView> views;
  bool given = false;
};

}  // namespace pscore::bindings

namespace pybind11::detail {

template <const pscore::bindings::BufferRole& Role>
struct type_caster<pscore::bindings::UserBuffer<Role>> {
  PYBIND11_TYPE_CASTER(pscore::bindings::UserBuffer<Role>, const_name("object"));

  // Raises what pscore.buffer.view raises for a buffer it cannot take.
  bool load(handle src, bool) {
    value.view = pscore::bindings::to_view(src, Role.what, Role.writable, nullptr);
    return true;
  }
};

template <const pscore::bindings::BufferRole& Role>
struct type_caster<pscore::bindings::UserBuffers<Role>> {
  PYBIND11_TYPE_CASTER(pscore::bindings::UserBuffers<Role>, const_name("list | None"));

  // Raises TypeError for anything but a list, a tuple or None, and what pscore.buffer.view
  // raises for an entry it cannot take.
  bool load(handle src, bool) {
    PyObject* list = src.ptr();
    if (list == Py_None) return true;
    if (!PyList_Check(list) && !PyTuple_Check(list))
      throw type_error(std::string(Role.what) + ": expected a list of tensors, got " +
                       Py_TYPE(list)->tp_name);
    value.given = true;
    value.views.reserve(static_cast<size_t>(PySequence_Fast_GET_SIZE(list)));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(list); ++i)
      value.views.push_back(pscore::bindings::to_view(PySequence_Fast_GET_ITEM(list, i), Role.what,
                                                      Role.writable, nullptr, i));
    return true;
  }
};

}  // namespace pybind11::detail
