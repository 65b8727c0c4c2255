// The functions of pscore._C.fast_calls (fast_calls.h). Each is a builtin whose `self` is a
// capsule owning the group. It reads its positional arguments with the casters pybind11 would use
// (so a buffer is viewed, and refused, as the ProcessGroup method does it), runs the call without
// the GIL, and returns None or the Work; errors are translated as pybind11's dispatcher translates
// them, and the forced unwind that ends a thread at interpreter exit passes through as it does
// there.
#include "bindings/fast_calls.h"

#include <pybind11/typing.h>

#ifdef __GLIBCXX__
#include <cxxabi.h>
#endif

#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings/gil.h"
#include "bindings/group_calls.h"
#include "bindings/work.h"

namespace pscore::bindings {

namespace {

namespace py = pybind11;
using Group = std::shared_ptr<ProcessGroup>;
using group_calls::WorkPtr;

template <class... Args>
using Casters = std::tuple<py::detail::make_caster<Args>...>;

// The index of the first argument its caster refused, or -1.
template <class... Args, size_t... I>
int first_refused(Casters<Args...>& casters, PyObject* const* args, std::index_sequence<I...>) {
  int refused = -1;
  ((refused < 0 && !std::get<I>(casters).load(args[I], true) ? refused = int(I) : 0), ...);
  return refused;
}

template <class... Args, size_t... I>
WorkPtr run(WorkPtr (*body)(ProcessGroup&, Args...), ProcessGroup& group, Casters<Args...>& casters,
            std::index_sequence<I...>) {
  return body(group, py::detail::cast_op<Args>(std::get<I>(casters))...);
}

template <const char* Name, class... Args>
PyObject* call(WorkPtr (*body)(ProcessGroup&, Args...), PyObject* self, PyObject* const* args,
               Py_ssize_t nargs) {
  constexpr auto arity = static_cast<Py_ssize_t>(sizeof...(Args));
  if (nargs != arity) {
    PyErr_Format(PyExc_TypeError, "%s() takes %zd positional arguments (%zd given)", Name, arity,
                 nargs);
    return nullptr;
  }
  auto* group = static_cast<Group*>(PyCapsule_GetPointer(self, nullptr));
  if (group == nullptr) return nullptr;
  try {
    const auto order = std::index_sequence_for<Args...>{};
    Casters<Args...> casters;
    if (const int refused = first_refused<Args...>(casters, args, order); refused >= 0) {
      PyErr_Format(PyExc_TypeError, "%s(): argument %d (%s) is not of a type it takes", Name,
                   refused + 1, Py_TYPE(args[refused])->tp_name);
      return nullptr;
    }
    WorkPtr work;
    {
      GilRelease nogil;
      work = run<Args...>(body, **group, casters, order);
    }
    if (!work) Py_RETURN_NONE;
    return py::cast(work).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
#ifdef __GLIBCXX__
  } catch (abi::__forced_unwind&) {  // a thread ended by a finalizing interpreter (gil.h)
    throw;
#endif
  } catch (...) {
    py::detail::try_translate_exceptions();
    return nullptr;
  }
}

template <const char* Name, auto Body>
PyObject* fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return call<Name>(Body, self, args, nargs);
}

template <const char* Name, auto Body>
PyMethodDef method(const char* doc) {
  return {Name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fast<Name, Body>)),
          METH_FASTCALL, doc};
}

constexpr char kAllreduce[] = "allreduce";
constexpr char kBroadcast[] = "broadcast";
constexpr char kReduce[] = "reduce";
constexpr char kAllgather[] = "allgather";
constexpr char kAllgatherInto[] = "allgather_into";
constexpr char kReduceScatter[] = "reduce_scatter";
constexpr char kReduceScatterFrom[] = "reduce_scatter_from";
constexpr char kGather[] = "gather";
constexpr char kScatter[] = "scatter";
constexpr char kAllToAll[] = "all_to_all";
constexpr char kAllToAllSingle[] = "all_to_all_single";
constexpr char kBarrier[] = "barrier";

// The functions, with the ProcessGroup methods' positional arguments.
const std::vector<PyMethodDef>& methods() {
  namespace c = group_calls;
  static const std::vector<PyMethodDef> all = {
      method<kAllreduce, &c::allreduce>("allreduce(tensor, op, async_op, /)"),
      method<kBroadcast, &c::broadcast>("broadcast(tensor, root, async_op, /)"),
      method<kReduce, &c::reduce>("reduce(tensor, op, root, async_op, /)"),
      method<kAllgather, &c::allgather>("allgather(tensor, tensor_list, async_op, /)"),
      method<kAllgatherInto, &c::allgather_into>("allgather_into(input, output, async_op, /)"),
      method<kReduceScatter, &c::reduce_scatter>(
          "reduce_scatter(output, input_list, op, async_op, /)"),
      method<kReduceScatterFrom, &c::reduce_scatter_from>(
          "reduce_scatter_from(input, output, op, async_op, /)"),
      method<kGather, &c::gather>("gather(tensor, gather_list, root, async_op, /)"),
      method<kScatter, &c::scatter>("scatter(tensor, scatter_list, root, async_op, /)"),
      method<kAllToAll, &c::all_to_all>(
          "all_to_all(output_tensor_list, input_tensor_list, async_op, /)"),
      method<kAllToAllSingle, &c::all_to_all_single>(
          "all_to_all_single(input, output, input_counts, output_counts, async_op, /)"),
      method<kBarrier, &c::barrier>("barrier(async_op, /)"),
  };
  return all;
}

void free_group(PyObject* capsule) {
  delete static_cast<Group*>(PyCapsule_GetPointer(capsule, nullptr));
}

using Function = py::typing::Callable<py::typing::Optional<TaskWork>(py::ellipsis)>;

py::typing::Dict<py::str, Function> fast_calls(Group group) {
  auto* owned = new Group(std::move(group));
  py::object capsule = py::reinterpret_steal<py::object>(PyCapsule_New(owned, nullptr, free_group));
  if (!capsule) {
    delete owned;
    throw py::error_already_set();
  }
  py::typing::Dict<py::str, Function> functions;
  for (const PyMethodDef& def : methods()) {
    // CPython keeps the PyMethodDef's address: methods() outlives every function.
    auto* made = PyCFunction_NewEx(const_cast<PyMethodDef*>(&def), capsule.ptr(), nullptr);
    if (made == nullptr) throw py::error_already_set();
    functions[def.ml_name] = py::reinterpret_steal<py::object>(made);
  }
  return functions;
}

}  // namespace

void bind_fast_calls(py::module_& m) {
  m.def("fast_calls", &fast_calls, py::arg("group"),
        "The group's collectives by name, as functions of positional arguments that skip "
        "pybind11's dispatcher: each returns None, or the Work of async_op or of a call queued "
        "behind other work.");
}

}  // namespace pscore::bindings
