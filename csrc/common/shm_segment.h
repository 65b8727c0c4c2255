// A named POSIX shared-memory segment: created by one process, mapped by others, unlinked early.
#pragma once

#include <cstddef>
#include <string>

namespace pscore {

class ShmSegment {
 public:
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Creates a zero-filled segment of nbytes; throws Error when the name exists or /dev/shm is full.
  // prefault: allocate every page now (so a full /dev/shm is this error, not a SIGBUS later) and
  // map them all, so first touches cost no page faults.
  static ShmSegment create(const std::string& name, size_t nbytes, bool prefault = false);
  // Maps an existing segment; throws NetworkError when it cannot be opened. prefault: map every
  // page now.
  static ShmSegment open(const std::string& name, bool prefault = false);

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  const std::string& name() const { return name_; }
  // Removes the name from /dev/shm; mappings stay valid. Idempotent.
  void unlink();

 private:
  void release();
  std::string name_;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  bool owner_ = false;
  bool unlinked_ = false;
};

}  // namespace pscore
