// Binds the Work protocol (common/work.h) on a concrete Work type, the same way in every
// module: wait(timeout_ms) -> bool (False: still running), is_completed(), failed(),
// exception_message(), what. pscore/work.py builds the Python protocol on these.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>

#include "bindings/gil.h"
#include "common/work.h"

namespace pscore::bindings {

template <class W>
pybind11::class_<W, std::shared_ptr<W>> bind_work(pybind11::module_& m, const char* name) {
  namespace py = pybind11;
  return py::class_<W, std::shared_ptr<W>>(m, name)
      .def(
          "wait", [](W& w, int64_t timeout_ms) { return w.wait(timeout_ms); },
          py::arg("timeout_ms") = -1, ReleaseGil())
      .def("is_completed", [](W& w) { return w.is_completed(); })
      .def("failed", [](W& w) { return w.failed(); })
      .def("exception_message", [](W& w) { return w.exception_message(); })
      .def_property_readonly("what", [](const W& w) { return w.what(); });
}

}  // namespace pscore::bindings
