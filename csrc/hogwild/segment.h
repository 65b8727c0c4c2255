// A named POSIX shared-memory segment holding one Hogwild table: a header with the table's
// spec and a registry of live handles (the reference count), the lock stripes, the parameters
// and the optimizer state. The last handle to detach removes the name from /dev/shm.
//
// Whether a handle lives is told by file leases (file_lease.h), not by pids: each handle keeps
// the segment's file open and leases the byte of its registry slot, and the kernel drops the
// lease when the process dies. That holds across pid namespaces (containers sharing /dev/shm)
// and is not fooled by a reused pid.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/error.h"
#include "hogwild/fork_generation.h"
#include "hogwild/owner_lock.h"
#include "hogwild/table_spec.h"

namespace pscore::hogwild {

constexpr uint64_t kSegmentMagic = 0x444c574748435350ull;  // "PSCHGWLD"
constexpr uint32_t kSegmentVersion = 3;
constexpr int kMaxAttachments = 1024;
// Leased bytes of the segment file: one per registry slot, then the registry's own lock, then
// the creator's (held from shm_open until its handle closes, so attachers see a creator die).
constexpr uint64_t kRegistryLease = kMaxAttachments;
constexpr uint64_t kCreatorLease = kMaxAttachments + 1;

enum SegmentState : uint32_t { kInitializing = 0, kReady = 1, kRemoved = 2 };

// The name is taken (create) or missing (attach); Python sees FileExistsError / FileNotFoundError.
class SegmentExists : public Error {
 public:
  using Error::Error;
};
class SegmentMissing : public Error {
 public:
  using Error::Error;
};

// Lies at offset 0 of the segment. Written once by the creator before `state` turns kReady,
// except the atomics, which every process updates.
struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  std::atomic<uint32_t> state;
  uint32_t dtype;
  uint32_t ndim;
  uint32_t optimizer;
  uint32_t lock_stripes;
  uint64_t shape[kMaxDims];
  TableLayout layout;
  int32_t creator_pid;  // in the creator's pid namespace; for messages only
  alignas(64) std::atomic<uint64_t> update_count;  // update calls applied, by all processes
  alignas(64) std::atomic<uint64_t> step;  // global Adam / Adagrad step when callers pass none
  // The registry, changed under the registry lease. Each live handle's slot holds its tag
  // (segment.cc's make_tag: a reused slot gets a new one).
  alignas(64) uint32_t registrations;
  std::atomic<int32_t> attached[kMaxAttachments];  // tag per live handle, 0 when free
  int32_t attached_pid[kMaxAttachments];           // each handle's pid, for messages
};

// How a handle maps its segment.
struct SegmentOptions {
  bool populate = true;              // MAP_POPULATE: fault every page in at map time
  int64_t wait_ms = 0;               // attach: how long to wait for the name to appear
  int64_t ready_timeout_ms = 30000;  // attach: how long to wait for the creator to finish
  int64_t lock_timeout_ms = 30000;   // registry lock and the locked variant's stripes
};

class Segment : public LockOwner {
 public:
  // Creates the segment, zero-filled, with this handle attached; it stays kInitializing until
  // publish(). A name left by processes that all died is reclaimed. Throws SegmentExists,
  // std::invalid_argument (bad name or spec) or Error (/dev/shm full).
  static std::unique_ptr<Segment> create(const std::string& name, const TableSpec& spec,
                                         const SegmentOptions& opts);
  // Maps an existing segment and registers this handle. Blocks up to opts.wait_ms for the name
  // and opts.ready_timeout_ms for the creator. Throws SegmentMissing, TimeoutError or Error.
  static std::unique_ptr<Segment> attach(const std::string& name, const SegmentOptions& opts);
  // Removes `name` from /dev/shm whoever holds it; false when it did not exist.
  static bool remove(const std::string& name);
  // "/pscore_hw_<name>"; throws std::invalid_argument unless name is 1-200 of [A-Za-z0-9._-].
  static std::string shm_path(const std::string& name);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Marks a created segment ready for attachers.
  void publish();
  // Releases this handle's registration (idempotent); the memory stays mapped until destruction.
  // The last live handle removes the name. Dead processes' registrations are reaped here.
  void detach();
  // Removes the name now; every mapping keeps working. Idempotent.
  void unlink();
  // Live registrations, after reaping dead ones.
  int live_attachments();

  // LockOwner: this handle's registry tag, and whether another tag's handle still lives. In a
  // fork of the process that registered, the handle first registers as the child
  // (rejoin_after_fork), so each process's locks are its own and die with it.
  int32_t lock_tag() override {
    if (generation_ != fork_generation()) rejoin_after_fork();
    return tag_;
  }
  bool holder_alive(int32_t tag) const override;
  std::string describe_holder(int32_t tag) const override;

  bool detached() const { return slot_ < 0; }
  bool is_creator() const { return creator_; }
  const std::string& name() const { return name_; }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  char* base() const { return base_; }
  uint64_t nbytes() const { return nbytes_; }
  int64_t lock_timeout_ms() const { return lock_timeout_ms_; }
  LockWord* locks() const {
    return reinterpret_cast<LockWord*>(base_ + header().layout.locks_offset);
  }

 private:
  Segment(std::string name, int fd, char* base, uint64_t nbytes, bool creator)
      : name_(std::move(name)), fd_(fd), base_(base), nbytes_(nbytes), creator_(creator) {}
  void register_self(int64_t lock_timeout_ms);
  void rejoin_after_fork();
  std::string what(const char* op) const;

  std::string name_;
  int fd_;  // kept open: the handle's leases live on it
  char* base_;
  uint64_t nbytes_;
  bool creator_;
  int slot_ = -1;            // registry slot, -1 once detached
  int32_t tag_ = 0;          // the slot's tag while registered (kept after detach, for locks)
  int32_t owner_pid_ = 0;    // the pid that registered
  uint64_t generation_ = 0;  // fork_generation() when it registered
  std::mutex rejoin_mu_;
  int64_t lock_timeout_ms_ = 30000;
};

}  // namespace pscore::hogwild
