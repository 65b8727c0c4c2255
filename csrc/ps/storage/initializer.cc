#include "ps/storage/initializer.h"

#include <algorithm>
#include <cmath>

namespace pscore::ps {
namespace {

// A uniform double in (0, 1) from a 64-bit hash (53 random bits, never exactly 0).
inline double unit_open(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace

void fill_initial_values(const InitializerSpec& spec, int64_t row_id, int64_t first_col, float* out,
                         int64_t n) {
  switch (spec.kind) {
    case InitKind::kZeros:
      std::fill(out, out + n, 0.0f);
      return;
    case InitKind::kConstant:
      std::fill(out, out + n, static_cast<float>(spec.a));
      return;
    default:
      break;
  }
  const uint64_t row_key = mix64(spec.seed ^ mix64(static_cast<uint64_t>(row_id)));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t col = static_cast<uint64_t>(first_col + i);
    uint64_t h1 = mix64(row_key + 2 * col);
    if (spec.kind == InitKind::kUniform) {
      out[i] = static_cast<float>(spec.a + (spec.b - spec.a) * unit_open(h1));
    } else {  // Box-Muller on two independent uniforms
      uint64_t h2 = mix64(row_key + 2 * col + 1);
      double r = std::sqrt(-2.0 * std::log(unit_open(h1)));
      double z = r * std::cos(2.0 * M_PI * unit_open(h2));
      out[i] = static_cast<float>(spec.a + spec.b * z);
    }
  }
}

}  // namespace pscore::ps
