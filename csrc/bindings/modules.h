// The six parts of the one extension module pscore._ext (csrc/bindings/ext_module.cc), each
// filling the submodule Python imports as pscore._types, pscore._C, pscore._gpu, pscore._store,
// pscore._ps or pscore._hogwild.
#pragma once

#include <pybind11/pybind11.h>

namespace pscore::bindings {

void init_types(pybind11::module_& m);    // types_module.cc: the enums every part takes
void init_core(pybind11::module_& m);     // core_module.cc: transports, collectives
void init_gpu(pybind11::module_& m);      // gpu_module.cc: the GPU libraries and NCCL
void init_store(pybind11::module_& m);    // store_module.cc
void init_ps(pybind11::module_& m);       // ps_module.cc
void init_hogwild(pybind11::module_& m);  // hogwild_module.cc

}  // namespace pscore::bindings
