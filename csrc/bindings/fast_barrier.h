// pscore._C.fast_barrier(group): group.barrier as a METH_FASTCALL function bound to the group,
// for pscore.barrier. A barrier is all call path: through pybind11's dispatcher (the overload
// walk, the casters of self and the bool, the holder cast of the returned Work) a 1-rank barrier
// took ~1670 instructions, of which the group's own work was ~320 (callgrind), and a 2-rank one
// on shared memory lost to Open MPI's (0.84 us against 0.60-0.65).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/typing.h>

#include <memory>

#include "bindings/gil.h"
#include "collectives/process_group.h"

namespace pscore::bindings {

namespace fast_barrier_detail {

using Group = std::shared_ptr<ProcessGroup>;

// self: a capsule owning a Group; args: (async_op,). Returns None, or the Work of async_op or of
// a barrier queued behind other work; errors are translated as pybind11 translates them.
inline PyObject* barrier_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "barrier(async_op) takes 1 argument");
    return nullptr;
  }
  const int async_op = PyObject_IsTrue(args[0]);
  if (async_op < 0) return nullptr;
  auto* group = static_cast<Group*>(PyCapsule_GetPointer(self, nullptr));
  if (group == nullptr) return nullptr;
  try {
    ProcessGroup::WorkPtr work;
    {
      GilRelease nogil;
      work = (*group)->barrier(async_op != 0);
    }
    if (!work) Py_RETURN_NONE;
    return pybind11::cast(work).release().ptr();
  } catch (...) {
    pybind11::detail::try_translate_exceptions();
    return nullptr;
  }
}

inline void free_group(PyObject* capsule) {
  delete static_cast<Group*>(PyCapsule_GetPointer(capsule, nullptr));
}

}  // namespace fast_barrier_detail

inline void bind_fast_barrier(pybind11::module_& m) {
  namespace py = pybind11;
  m.def(
      "fast_barrier",
      [](fast_barrier_detail::Group group)
          -> py::typing::Callable<py::typing::Optional<TaskWork>(bool)> {
        static PyMethodDef def = {
            "barrier", reinterpret_cast<PyCFunction>(fast_barrier_detail::barrier_call),
            METH_FASTCALL,
            "barrier($self, async_op, /)\n--\n\nThe group's barrier: None, or its Work."};
        auto* owned = new fast_barrier_detail::Group(std::move(group));
        PyObject* capsule = PyCapsule_New(owned, nullptr, fast_barrier_detail::free_group);
        if (capsule == nullptr) {
          delete owned;
          throw py::error_already_set();
        }
        PyObject* function = PyCFunction_NewEx(&def, capsule, nullptr);
        Py_DECREF(capsule);
        if (function == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::function>(function);
      },
      py::arg("group"), "group.barrier(async_op) as a function with no dispatcher.");
}

}  // namespace pscore::bindings
