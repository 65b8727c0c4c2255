// What a shared table holds (shape, element type, optimizer state) and where each part lies in
// its segment. Pure arithmetic: used by the creator to size the segment and by attachers to check
// it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace pscore::hogwild {

// Which per-element optimizer state the segment carries next to the parameters, in torch's names:
// none (plain SGD); Adagrad's "sum"; Adam's "exp_avg", "exp_avg_sq"; SGD's "momentum_buffer" (and
// one byte per row saying whether the row's buffer has started); Adam with amsgrad's
// "exp_avg", "exp_avg_sq", "max_exp_avg_sq".
enum class OptimizerState : uint32_t {
  kNone = 0,
  kAdagrad = 1,
  kAdam = 2,
  kMomentum = 3,
  kAmsgrad = 4,
};

constexpr uint32_t kMaxStateSlots = 3;

constexpr int kMaxDims = 4;
constexpr uint32_t kDefaultLockStripes = 1024;

// Options for SharedTable::create; the defaults make a float32 table with no optimizer state.
struct TableSpec {
  std::vector<uint64_t> shape;  // 1 to 4 dims; rows = shape[0], dim = product of the rest
  DType dtype = DType::kFloat32;
  OptimizerState optimizer = OptimizerState::kNone;
  uint32_t lock_stripes = kDefaultLockStripes;  // striped locks of the locked variant
};

// Byte offsets of each part of a segment: the parameters page-aligned, the state arrays staggered.
struct TableLayout {
  uint64_t rows = 0;
  uint64_t dim = 0;           // elements per row
  uint64_t granule_rows = 1;  // rows guarded by one lock stripe
  uint64_t locks_offset = 0;
  uint64_t data_offset = 0;
  uint64_t state_offset[kMaxStateSlots] = {0, 0, 0};
  uint64_t row_flags_offset = 0;  // kMomentum: one byte per row, 1 once its buffer has started
  uint64_t total_bytes = 0;
  uint32_t state_slots = 0;  // arrays shaped like the parameters: 0, 1, 2 or 3
};

// Throws std::invalid_argument for a dtype other than float32/float64, 0 or >4 dims, a zero
// extent, zero lock stripes or a size that overflows.
TableLayout plan_layout(const TableSpec& spec, size_t header_bytes);

uint32_t state_slots(OptimizerState opt);
const char* optimizer_name(OptimizerState opt);
std::string shape_string(const std::vector<uint64_t>& shape);

}  // namespace pscore::hogwild
