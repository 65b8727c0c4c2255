// pscore._types (part of pscore._ext): the C++ enums that Python names by string (dtypes, reduce
// ops, optimizer kinds), exported once with upper-case members; Python looks them up by
// lower-case name (pscore/_enums.py) and keeps no table of their numbers. _C, _ps and _hogwild
// take and return these same types: they are parts of the same extension module, bound after
// _types (ext_module.cc).
#include <pybind11/pybind11.h>

#include "bindings/modules.h"
#include "common/dtype.h"
#include "common/optimizer_formulas.h"

namespace pscore::bindings {

void init_types(pybind11::module_& m) {
  namespace py = pybind11;
  m.doc() = "pscore core: the enums every part takes";
  py::enum_<DType>(m, "DType", "Element types (csrc/common/dtype.h), by pscore's dtype names.")
      .value("FLOAT16", DType::kFloat16)
      .value("BFLOAT16", DType::kBFloat16)
      .value("FLOAT32", DType::kFloat32)
      .value("FLOAT64", DType::kFloat64)
      .value("INT8", DType::kInt8)
      .value("UINT8", DType::kUInt8)
      .value("INT32", DType::kInt32)
      .value("INT64", DType::kInt64);
  py::enum_<ReduceOp>(m, "ReduceOp", "Reductions; band, bor and bxor take integer dtypes only.")
      .value("SUM", ReduceOp::kSum)
      .value("PROD", ReduceOp::kProd)
      .value("MIN", ReduceOp::kMin)
      .value("MAX", ReduceOp::kMax)
      .value("AVG", ReduceOp::kAvg)
      .value("BAND", ReduceOp::kBand)
      .value("BOR", ReduceOp::kBor)
      .value("BXOR", ReduceOp::kBxor);
  py::enum_<OptimizerKind>(m, "OptimizerKind",
                           "Optimizers (csrc/common/optimizer_formulas.h), by torch.optim's names.")
      .value("SGD", OptimizerKind::kSgd)
      .value("ADAGRAD", OptimizerKind::kAdagrad)
      .value("ADAM", OptimizerKind::kAdam)
      .value("ADAMW", OptimizerKind::kAdamW)
      .value("RMSPROP", OptimizerKind::kRmsprop);
}

}  // namespace pscore::bindings
