// Placement: dense tables are split into contiguous parts balanced by bytes over the shards (a
// large tensor spreads over every shard; a small one goes whole to the least loaded), sparse
// rows hash to shards by id.
#pragma once

#include <cstdint>
#include <vector>

#include "ps/storage/initializer.h"
#include "ps/wire/table_spec.h"

namespace pscore::ps {

struct PartitionOptions {
  // A table is cut into at most bytes / min_part_bytes parts (and at most one per shard).
  int64_t min_part_bytes = 64 * 1024;
};

// Plans the parts of a dense table of numel elements of elem_bytes each, given the bytes each
// shard already holds; adds the new parts' bytes to shard_bytes. Deterministic: ties go to the
// lower shard index.
std::vector<DensePart> plan_dense_parts(int64_t numel, int64_t elem_bytes,
                                        std::vector<int64_t>& shard_bytes,
                                        const PartitionOptions& opts = {});

// The shard that owns sparse row `id` (any int64 value).
inline int shard_for_id(int64_t id, int num_shards) {
  return static_cast<int>(mix64(static_cast<uint64_t>(id)) % static_cast<uint64_t>(num_shards));
}

}  // namespace pscore::ps
