// Everything one shard holds: its tables, the catalog of table layouts (kept by shard 0, which
// places dense tables), the global step, finished workers, and the write-ahead log and snapshots
// that make the shard recoverable. Thread-safe: table operations hold the apply gate shared,
// snapshots copy the state under it held exclusively (a consistent cut) and write the copy after
// releasing it, so requests wait for the copy, not for the disk; loads hold it throughout.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "ps/durability/update_log.h"
#include "ps/server/shard_checkpoint.h"
#include "ps/storage/partitioner.h"
#include "ps/storage/server_table.h"

namespace pscore::ps {

struct ShardOptions {
  int shard = 0;
  int num_shards = 1;
  int num_workers = 1;
  // When set, the shard logs every update to <dir>/shard-i-of-n.wal and recover() rebuilds it
  // from <dir>/shard-i-of-n.safetensors plus that log.
  std::string recover_dir;
  bool fsync_log = false;
  PartitionOptions partition;
};

class ShardState {
 public:
  explicit ShardState(const ShardOptions& opts);
  ~ShardState();

  // Loads the snapshot in recover_dir (if any), replays the log after it, then starts logging.
  // Returns the number of log records replayed.
  uint64_t recover();

  // Catalog (shard 0): the layout of `spec`, placing it when new. Second: true when created.
  std::pair<TableLayout, bool> catalog_create(const TableSpec& spec);
  TableLayout catalog_lookup(const std::string& name) const;
  std::vector<TableLayout> catalog_list() const;  // every table, by name

  // Creates this shard's part of a table (idempotent: an existing part is kept, and a spec that
  // differs from it is an error). init: this part's initial values, or null.
  bool create_part(const TableLayout& layout, const float* init, int64_t init_numel);
  std::shared_ptr<ServerTable> table(uint32_t id) const;  // throws TableNotFound
  std::vector<std::shared_ptr<ServerTable>> tables() const;
  // Removes table `name`: this shard's part and (shard 0) its catalog entry, logged; pushes
  // parked in it are answered as dropped through `parked`. Waits for the requests in flight.
  // Returns false when the shard held neither.
  bool drop_table(const std::string& name, ReplyOutbox& parked);

  void worker_done(int worker, ReplyOutbox& out);
  int64_t add_global_step(int64_t delta);

  // Writes <dir>/shard-i-of-n.safetensors (tables, optimizer state, consistency state, catalog,
  // global step) atomically. Drops the log records it covers when dir is the recover dir.
  void save(const std::string& dir);
  // Replaces every table with those in <dir>/shard-i-of-n.safetensors. Pushes parked in an
  // open sync round or behind the ssp bound are answered as dropped, through `parked`.
  void load(const std::string& dir, ReplyOutbox& parked);

  // Held shared by every table operation.
  std::shared_mutex& apply_gate() { return gate_; }
  const ShardOptions& options() const { return opts_; }
  std::string snapshot_path(const std::string& dir) const;
  std::vector<int64_t> catalog_shard_bytes() const;
  bool logging() const { return log_ != nullptr; }
  uint64_t log_bytes() const { return log_ ? log_->bytes() : 0; }
  // The size of the last snapshot in recover_dir (written or recovered from); 0 when none.
  uint64_t snapshot_bytes() const { return snapshot_bytes_.load(std::memory_order_relaxed); }

 private:
  friend class ShardCheckpoint;
  // Applies one write-ahead log record; `where` names the log and the record for errors.
  void replay_record(LogKind kind, WireReader& r, const std::string& where);
  void add_part_locked(const TableLayout& layout, const float* init, int64_t init_numel);
  bool drop_locked(const std::string& name, ReplyOutbox& parked);
  void catalog_add_locked(const TableLayout& layout);
  void write_snapshot(const CheckpointImage& image, const std::string& dir,
                      const UpdateLog::Mark& mark);
  void load_locked(const std::string& path, ReplyOutbox& parked,
                   ShardCheckpoint::DoneWorkers done_workers);

  ShardOptions opts_;
  std::mutex save_mu_;  // one save or load at a time (a save writes after releasing the gate)
  std::shared_mutex gate_;
  mutable std::mutex mu_;  // tables_, catalog_, done_, global_step_
  std::map<uint32_t, std::shared_ptr<ServerTable>> tables_;
  std::map<std::string, TableLayout> catalog_;
  std::map<uint32_t, std::string> dropped_;  // ids dropped since start (for clearer errors)
  std::vector<int64_t> shard_bytes_;
  std::vector<uint8_t> done_;
  int64_t global_step_ = 0;
  std::unique_ptr<UpdateLog> log_;
  uint64_t snapshot_wal_index_ = 0;  // where the loaded snapshot's log replay starts
  std::atomic<uint64_t> snapshot_bytes_{0};
};

}  // namespace pscore::ps
