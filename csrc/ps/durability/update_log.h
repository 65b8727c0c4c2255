// The write-ahead log of a recoverable shard: every state change (applied gradient, assignment,
// new table, finished worker, global step) is appended before it is acknowledged, so a shard
// killed at any instant is rebuilt by loading its last snapshot and replaying the records after
// it. Records are length-prefixed and checksummed; a torn tail (a kill mid-write) is ignored.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/wire_codec.h"

namespace pscore::ps {

enum class LogKind : uint8_t {
  kApplyDense = 1,
  kApplySparse = 2,
  kAssignDense = 3,
  // Logs written up to commit 780a580 recorded new tables and parts with the layout in the wire
  // encoding of the day; they are replayed, never written (checkpoint_legacy_v1 reads them).
  kCatalogAddWireV1 = 4,
  kCreatePartWireV1 = 5,
  kWorkerDone = 6,
  kGlobalStep = 7,
  kDropTable = 8,
  kCatalogAdd = 9,   // the layout as a log table record (log_table_record.h)
  kCreatePart = 10,  // the layout as a log table record, u64 n, n f32 initial values
};

class UpdateLog {
 public:
  // Opens (creating) the log at path for appending; records get indices from first_index on.
  // fsync_each: fsync after every record (survives machine crashes, not only process kills).
  UpdateLog(const std::string& path, uint64_t first_index, bool fsync_each);
  ~UpdateLog();
  UpdateLog(const UpdateLog&) = delete;
  UpdateLog& operator=(const UpdateLog&) = delete;

  // Appends one record made of the concatenated parts; thread-safe. Throws Error on I/O failure
  // (ENOSPC included), leaving the file as it was: a partly written record is cut off again.
  void append(LogKind kind, const std::vector<std::pair<const void*, size_t>>& parts);
  // Where the next record will go: its index (a snapshot records it to know where replay starts)
  // and its byte offset in the file.
  struct Mark {
    uint64_t index = 0;
    uint64_t offset = 0;
  };
  Mark mark() const;
  // Drops the records before `m` once a snapshot taken at `m` is on disk, keeping those appended
  // since: they are copied to a new file that replaces the log. On an I/O error the log is left
  // as it was (replay skips records the snapshot covers) and Error is thrown.
  void drop_before(const Mark& m);
  const std::string& path() const { return path_; }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }  // the file's size

  // Calls fn(kind, index, payload) for each intact record with index >= from_index; returns the
  // index after the last record read (from_index when there are none). *intact_bytes receives
  // the length of the intact prefix (the caller truncates a torn tail before appending).
  static uint64_t replay(const std::string& path, uint64_t from_index,
                         const std::function<void(LogKind, uint64_t, WireReader&)>& fn,
                         uint64_t* intact_bytes);

 private:
  uint64_t size_locked() const;
  void roll_back(uint64_t end);

  std::string path_;
  int fd_ = -1;
  bool fsync_each_;
  mutable std::mutex mu_;
  uint64_t next_index_;
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace pscore::ps
