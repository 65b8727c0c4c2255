// Converts a shard's state to and from one safetensors file: each table's values and optimizer
// state as tensors ("<name>", "<name>:state", sparse "<name>:ids" and "<name>:steps"), and in
// the metadata the table layouts (checkpoint_metadata.h), consistency state, catalog, global
// step and log position.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ps/durability/safetensors_file.h"

namespace pscore::ps {

class ShardState;

// A copy of a shard's state taken at one instant, written to disk later: requests go on while
// the file is written (memory: one more copy of the shard for the length of the write).
class CheckpointImage {
 public:
  // Writes the image atomically (temp file, fsync, rename); throws Error naming the path.
  void write(const std::string& path) const { writer_.write(path); }

 private:
  friend class ShardCheckpoint;
  SafetensorsWriter writer_;
  std::vector<std::shared_ptr<const void>> owned_;  // the copies writer_ points into
};

class ShardCheckpoint {
 public:
  // Copies the shard; the caller holds the apply gate exclusively.
  static CheckpointImage capture(ShardState& shard, uint64_t wal_index);
  // Replaces the shard's tables, catalog and counters; the caller holds the gate exclusively.
  // Which workers count as done after a read: those the checkpoint recorded (recovering this
  // shard's own snapshot: the same job goes on) or those the live shard has now (a job loading
  // a checkpoint: done is about its running workers, not about the tables).
  enum class DoneWorkers { kFromCheckpoint, kFromLiveShard };
  static void read(ShardState& shard, const std::string& path, DoneWorkers done_workers);
};

}  // namespace pscore::ps
