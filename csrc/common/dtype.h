// Element types and reduction ops that cross the wire and the bindings, with their sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pscore {

enum class DType : uint8_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  kFloat64 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt32 = 6,
  kInt64 = 7,
};

// kBand, kBor and kBxor are bitwise and apply to integer types only.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  kAvg = 4,
  kBand = 5,
  kBor = 6,
  kBxor = 7,
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* reduce_op_name(ReduceOp op);
// Throws DTypeError when op does not apply to t (a bitwise op on a floating-point type).
void check_reduce_op(ReduceOp op, DType t);
// Throws std::invalid_argument for an unknown code (a BufferView's dtype code from Python).
DType dtype_from_code(int code);

}  // namespace pscore
