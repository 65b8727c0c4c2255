// pscore._C.fast_calls(group): the group's collectives (bindings/group_calls.h) as METH_FASTCALL
// functions bound to the group, for pscore's Python functions (collectives/group.py, CoreCalls).
// On the latency path most of a call is call path: through pybind11's dispatcher (the overload
// walk, the casters, the holder cast of the returned Work) a 1-rank barrier took ~1670
// instructions, of which the group's own work was ~320 (callgrind).
#pragma once

#include <pybind11/pybind11.h>

namespace pscore::bindings {

void bind_fast_calls(pybind11::module_& m);

}  // namespace pscore::bindings
