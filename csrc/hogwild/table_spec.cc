#include "hogwild/table_spec.h"

#include <stdexcept>

#include "hogwild/owner_lock.h"

namespace pscore::hogwild {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kGranuleBytes = 4096;  // target bytes of parameters under one lock stripe
constexpr uint64_t kStateStagger = 1344;  // 21 cache lines

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

uint64_t checked_mul(uint64_t a, uint64_t b, const TableSpec& spec) {
  if (a != 0 && b > UINT64_MAX / a) {
    throw std::invalid_argument("table shape " + shape_string(spec.shape) + " overflows 64 bits");
  }
  return a * b;
}

}  // namespace

uint32_t state_slots(OptimizerState opt) {
  switch (opt) {
    case OptimizerState::kNone:
      return 0;
    case OptimizerState::kAdagrad:
      return 1;
    case OptimizerState::kAdam:
      return 2;
    case OptimizerState::kMomentum:
      return 1;
    case OptimizerState::kAmsgrad:
      return 3;
  }
  return 0;
}

const char* optimizer_name(OptimizerState opt) {
  switch (opt) {
    case OptimizerState::kNone:
      return "none";
    case OptimizerState::kAdagrad:
      return "adagrad";
    case OptimizerState::kAdam:
      return "adam";
    case OptimizerState::kMomentum:
      return "momentum";
    case OptimizerState::kAmsgrad:
      return "amsgrad";
  }
  return "?";
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

TableLayout plan_layout(const TableSpec& spec, size_t header_bytes) {
  if (spec.dtype != DType::kFloat32 && spec.dtype != DType::kFloat64) {
    throw std::invalid_argument(std::string("shared tables hold float32 or float64, not ") +
                                dtype_name(spec.dtype));
  }
  if (spec.shape.empty() || spec.shape.size() > kMaxDims) {
    throw std::invalid_argument("table shape " + shape_string(spec.shape) +
                                " must have 1 to 4 dimensions");
  }
  for (uint64_t extent : spec.shape) {
    if (extent == 0) {
      throw std::invalid_argument("table shape " + shape_string(spec.shape) + " has a zero extent");
    }
  }
  if (spec.lock_stripes == 0) throw std::invalid_argument("lock_stripes must be at least 1");
  TableLayout l;
  l.rows = spec.shape[0];
  l.dim = 1;
  for (size_t i = 1; i < spec.shape.size(); ++i) l.dim = checked_mul(l.dim, spec.shape[i], spec);
  const uint64_t elem = dtype_size(spec.dtype);
  const uint64_t row_bytes = checked_mul(l.dim, elem, spec);
  l.granule_rows = row_bytes >= kGranuleBytes ? 1 : kGranuleBytes / row_bytes;
  l.state_slots = state_slots(spec.optimizer);
  const uint64_t array_bytes = round_up(checked_mul(l.rows, row_bytes, spec), kPage);
  l.locks_offset = round_up(header_bytes, 64);
  l.data_offset = round_up(l.locks_offset + uint64_t{spec.lock_stripes} * sizeof(LockWord), kPage);
  // State array s starts (s+1) * kStateStagger bytes past a page boundary: row r of each array
  // then falls in a different cache set and 4 KiB slot than row r of the parameters.
  for (uint32_t s = 0; s < l.state_slots; ++s) {
    l.state_offset[s] = l.data_offset + (s + 1) * (array_bytes + kStateStagger);
  }
  const uint64_t arrays_end = l.data_offset + (l.state_slots + 1) * (array_bytes + kStateStagger);
  if (spec.optimizer == OptimizerState::kMomentum) {
    l.row_flags_offset = round_up(arrays_end, 64);
    l.total_bytes = round_up(l.row_flags_offset + l.rows, kPage);
  } else {
    l.total_bytes = round_up(arrays_end, kPage);
  }
  return l;
}

}  // namespace pscore::hogwild
