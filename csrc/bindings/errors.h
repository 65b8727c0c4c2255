// Maps pscore's C++ exceptions onto the Python classes in pscore/errors.py, for every module.
#pragma once

#include <pybind11/pybind11.h>

#include "common/error.h"

namespace pscore::bindings {

// Registers a translator: pscore::TimeoutError -> pscore.errors.TimeoutError (a builtin
// TimeoutError), NetworkError -> ConnectionError subclass, DTypeError -> TypeError, StoreError /
// Error -> RuntimeError.
inline void register_error_translator() {
  namespace py = pybind11;
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    auto raise = [](const char* cls, const char* msg) {
      py::object errors = py::module_::import("pscore.errors");
      py::object type = errors.attr(cls);
      PyErr_SetString(type.ptr(), msg);
    };
    try {
      std::rethrow_exception(p);
    } catch (const pscore::DTypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const pscore::TimeoutError& e) {
      raise("TimeoutError", e.what());
    } catch (const pscore::NetworkError& e) {
      raise("NetworkError", e.what());
    } catch (const pscore::StoreError& e) {
      raise("StoreError", e.what());
    } catch (const pscore::Error& e) {
      raise("Error", e.what());
    }
  });
}

}  // namespace pscore::bindings
