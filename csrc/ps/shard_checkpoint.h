// Converts a shard's state to and from one safetensors file: each table's values and optimizer
// state as tensors ("<name>", "<name>:state", sparse "<name>:ids" and "<name>:steps"), and in
// the metadata the table layouts, consistency state, catalog, global step and log position.
#pragma once

#include <cstdint>
#include <string>

namespace pscore::ps {

class ShardState;

class ShardCheckpoint {
 public:
  // Writes the shard atomically; the caller holds the apply gate exclusively.
  static void write(ShardState& shard, const std::string& path, uint64_t wal_index);
  // Replaces the shard's tables, catalog and counters; the caller holds the gate exclusively.
  static void read(ShardState& shard, const std::string& path);
};

}  // namespace pscore::ps
