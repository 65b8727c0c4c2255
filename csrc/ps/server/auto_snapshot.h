// Keeps a recoverable shard's write-ahead log bounded: snapshots the shard into its recover dir
// (which truncates the log) when the log outgrows the tables or a period has passed, on a
// thread of its own, and holds requests back while the log is far past its bound.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "ps/server/shard_state.h"

namespace pscore::ps {

struct SnapshotPolicy {
  int64_t every_ms = 0;  // snapshot this often while the log is not empty; 0: not by time
  // Snapshot when the log passes max(log_min_bytes, log_ratio x the last snapshot's size);
  // log_min_bytes 0: not by size (the log grows until a timed or requested snapshot).
  uint64_t log_min_bytes = uint64_t(64) << 20;
  double log_ratio = 2.0;
  // How long stop() waits for a snapshot being written (a stuck disk) before it gives up.
  int64_t stop_timeout_ms = 120000;

  // The log size at which a snapshot is due (0: never by size). Requests wait at twice it.
  uint64_t due_bytes(uint64_t snapshot_bytes) const;
};

class AutoSnapshot {
 public:
  AutoSnapshot(ShardState& shard, const SnapshotPolicy& policy);
  ~AutoSnapshot();
  AutoSnapshot(const AutoSnapshot&) = delete;
  AutoSnapshot& operator=(const AutoSnapshot&) = delete;

  void start();
  // Called before a request is handled, with no lock held. Asks for a snapshot once the log
  // has passed due_bytes; while it is at twice that or more, blocks until the next snapshot is
  // written or fails (after a failure requests pass until one succeeds) or stop().
  void admit();
  // Stops the thread after the snapshot being written, if any; throws TimeoutError when that
  // snapshot is still being written after stop_timeout_ms (the thread is then joined by the
  // destructor, which waits for it). Idempotent.
  void stop();
  uint64_t snapshots_written() const;
  bool writing() const;  // a snapshot is being written now

 private:
  void run();
  bool snapshot();  // false on failure (reported on stderr)

  ShardState& shard_;
  SnapshotPolicy policy_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable wake_;      // the thread: a snapshot is due, or stop
  std::condition_variable finished_;  // admit(): a snapshot attempt ended, or stop
  bool due_ = false, stop_ = false, failed_ = false, writing_ = false;
  uint64_t attempts_ = 0, written_ = 0;
};

}  // namespace pscore::ps
