// Buffers as the caller passed them (numpy arrays, torch tensors, __dlpack__ objects or
// pscore.buffer.BufferViews), for bindings on the latency path: a numpy array or a CPU torch
// tensor is read here without a Python view being made (fast_view.h), so a collective on one
// costs one call into C++ from its Python function.
#pragma once

#include <pybind11/pybind11.h>

#include "bindings/buffer_view_caster.h"
#include "bindings/fast_view.h"
#include "common/buffer_view.h"

namespace pscore::bindings {

// The view of x. Anything numpy_view and tensor_host_view do not take (CUDA tensors, __dlpack__
// objects, buffers with something to explain) goes through pscore.buffer.view, which makes the
// view or raises the error naming `what`; `host` is view()'s host argument (nullptr: None, CUDA
// memory too). The memory stays x's, and x lives through the call: the view may go when this
// returns.
inline BufferView to_view(pybind11::handle x, const char* what, bool writable, const char* host) {
  namespace py = pybind11;
  BufferView v;
  if (fast_view_detail::tensor_host_view(x.ptr(), &v) || numpy_view(x, writable, &v)) return v;
  py::detail::make_caster<BufferView> caster;
  if (caster.load(x, false)) return py::detail::cast_op<BufferView>(caster);
  static const auto* view = new py::object(py::module_::import("pscore.buffer").attr("view"));
  using namespace py::literals;
  py::object made = (*view)(x, "writable"_a = writable, "what"_a = what, "host"_a = host);
  if (!caster.load(made, false)) throw py::type_error("pscore.buffer.view made no BufferView");
  return py::detail::cast_op<BufferView>(caster);
}

// How a buffer argument is named in errors, and whether the call writes into it.
struct BufferRole {
  const char* what;
  bool writable;
};
inline constexpr BufferRole kTensorArg{"tensor", true};
inline constexpr BufferRole kInputArg{"input", false};
inline constexpr BufferRole kOutputArg{"output", true};

// A binding argument read by to_view (host or CUDA memory) in the role `Role`.
template <const BufferRole& Role>
struct UserBuffer {
  BufferView view;
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

}  // namespace pybind11::detail
