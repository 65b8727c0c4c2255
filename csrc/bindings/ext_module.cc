// pscore._ext: the one extension module. Its six parts are modules named, registered in
// sys.modules and set on the package as pscore._types, pscore._C, pscore._gpu, pscore._store,
// pscore._ps and pscore._hogwild (pscore/__init__.py imports _ext first), so the rest of the
// package, and the type stubs (pscore/_C.pyi, ...), see modules of their own. _types comes first:
// it binds the enums the others take.
#include <pybind11/pybind11.h>

#include <string>

#include "bindings/errors.h"
#include "bindings/modules.h"

namespace py = pybind11;

PYBIND11_MODULE(_ext, m) {
  m.doc() = "pscore's C++ core; import its parts as pscore._types, _C, _gpu, _store, _ps, _hogwild";
  pscore::bindings::register_error_translator();  // before the parts' own, which go first
  py::object modules = py::module_::import("sys").attr("modules");
  py::object package = modules.attr("get")("pscore");  // being imported; None if loaded alone
  auto part = [&](const char* name, void (*init)(py::module_&)) {
    const std::string qualified = std::string("pscore.") + name;
    auto sub = py::reinterpret_steal<py::module_>(PyModule_New(qualified.c_str()));
    if (!sub) throw py::error_already_set();
    init(sub);
    m.attr(name) = sub;
    modules[py::str(qualified)] = sub;
    if (!package.is_none()) package.attr(name) = sub;
  };
  part("_types", pscore::bindings::init_types);
  part("_C", pscore::bindings::init_core);
  part("_gpu", pscore::bindings::init_gpu);
  part("_store", pscore::bindings::init_store);
  part("_ps", pscore::bindings::init_ps);
  part("_hogwild", pscore::bindings::init_hogwild);
}
