// Deterministic table initializers: each value is a function of (seed, row id, column) only, so
// rows created lazily, in any order, on any server incarnation come out identical.
#pragma once

#include <cstdint>

#include "ps/wire/table_spec.h"

namespace pscore::ps {

// Fills n values of row `row_id` (a sparse id, or 0 for a dense table, whose columns are the
// element indices starting at `first_col`).
void fill_initial_values(const InitializerSpec& spec, int64_t row_id, int64_t first_col, float* out,
                         int64_t n);

// SplitMix64 finaliser: a strong 64-bit mix, also used to hash sparse ids to shards.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace pscore::ps
