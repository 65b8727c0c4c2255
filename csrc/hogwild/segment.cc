#include "hogwild/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>

#include "common/clock.h"
#include "common/fd.h"
#include "hogwild/file_lease.h"

namespace pscore::hogwild {
namespace {

void pause_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

char* map_fd(int fd, uint64_t nbytes, bool populate, const std::string& what) {
  int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  void* p = ::mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED)
    throw Error(errno_message(what + ": mmap of " + std::to_string(nbytes) + " bytes", errno));
  return static_cast<char*>(p);
}

// One thread of this process at a time, waited for with a timeout. A flag under a mutex and a
// condition variable rather than std::timed_mutex: libstdc++'s try_lock_for goes through
// pthread_mutex_clocklock, which ThreadSanitizer (GCC 12) does not see, so every unlock after a
// timed lock was reported as the unlock of an unlocked mutex.
class ThreadGate {
 public:
  // Enters the gate; false if another thread kept it for longer than timeout_ms (< 0: forever).
  bool enter(int64_t timeout_ms) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto free = [this] { return !held_; };
    if (timeout_ms < 0) {
      changed_.wait(lock, free);
    } else if (!changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), free)) {
      return false;
    }
    held_ = true;
    return true;
  }
  void leave() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held_ = false;
    }
    changed_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = false;
};

// The registry lock: a lease on kRegistryLease orders processes (and goes with a process that
// dies holding it); a process-wide gate orders this process's threads, whose leases on one
// open file description would not exclude each other.
class RegistryGuard {
 public:
  RegistryGuard(int fd, int64_t timeout_ms, const std::string& what) : fd_(fd) {
    if (!threads().enter(timeout_ms)) {
      throw TimeoutError(what + ": another thread held the registry for more than " +
                         std::to_string(timeout_ms) + " ms");
    }
    try {
      take_lease(fd_, kRegistryLease, timeout_ms, what);
    } catch (...) {
      threads().leave();
      throw;
    }
  }
  ~RegistryGuard() {
    release_lease(fd_, kRegistryLease);
    threads().leave();
  }
  RegistryGuard(const RegistryGuard&) = delete;
  RegistryGuard& operator=(const RegistryGuard&) = delete;

 private:
  static ThreadGate& threads() {
    static ThreadGate gate;
    return gate;
  }
  int fd_;
};

// Clears the registrations whose handles died (their slot's lease is gone); returns the live
// count. `own_slot` is the caller's registration, live by definition (a lease is invisible to
// the description that holds it). Caller holds the registry.
int reap_locked(SegmentHeader& h, int fd, int own_slot) {
  int live = 0;
  for (int i = 0; i < kMaxAttachments; ++i) {
    if (h.attached[i].load(std::memory_order_relaxed) == 0) continue;
    if (i == own_slot || lease_held_elsewhere(fd, static_cast<uint64_t>(i))) {
      ++live;
    } else {
      h.attached[i].store(0, std::memory_order_relaxed);
    }
  }
  return live;
}

// A registration's tag: its slot + 1 in the low 16 bits, the registration count above, so a
// reused slot gets a new tag (positive, and never 0, which marks a free lock).
int32_t make_tag(int slot, uint32_t registrations) {
  return static_cast<int32_t>(((registrations & 0x7fffu) << 16) | static_cast<uint32_t>(slot + 1));
}

// The slot a tag names, or -1 when it names none.
int slot_of(int32_t tag) {
  const int slot = (tag & 0xffff) - 1;
  return slot < kMaxAttachments ? slot : -1;
}

// Marks the segment removed and unlinks its name. Caller holds the registry.
void remove_locked(SegmentHeader& h, const std::string& path) {
  h.state.store(kRemoved, std::memory_order_release);
  ::shm_unlink(path.c_str());
}

// A segment at `path` whose processes all died (or whose creator died while initialising it)
// is removed; true when it was (or was already being) removed.
bool reclaim_if_stale(const std::string& path) {
  Fd fd;
  fd.fd = ::shm_open(path.c_str(), O_RDWR, 0);
  if (fd.fd < 0) return errno == ENOENT;
  struct stat st;
  if (::fstat(fd.fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < sizeof(SegmentHeader)) {
    return false;  // still being sized by a live creator, or not ours
  }
  char* base = map_fd(fd.fd, sizeof(SegmentHeader), false, "inspect " + path);
  auto& h = *reinterpret_cast<SegmentHeader*>(base);
  bool stale = false;
  if (h.magic == kSegmentMagic && h.version == kSegmentVersion) {
    RegistryGuard guard(fd.fd, 5000, "reclaim stale shared table " + path);
    uint32_t state = h.state.load(std::memory_order_acquire);
    if (state == kRemoved) {
      stale = true;
    } else if (state == kInitializing) {
      stale = !lease_held_elsewhere(fd.fd, kCreatorLease);
    } else {
      stale = reap_locked(h, fd.fd, -1) == 0;
    }
    if (stale) remove_locked(h, path);
  }
  ::munmap(base, sizeof(SegmentHeader));
  return stale;
}

void write_header(SegmentHeader& h, const TableSpec& spec, const TableLayout& layout) {
  new (&h) SegmentHeader();
  h.version = kSegmentVersion;
  h.dtype = static_cast<uint32_t>(spec.dtype);
  h.ndim = static_cast<uint32_t>(spec.shape.size());
  h.optimizer = static_cast<uint32_t>(spec.optimizer);
  h.lock_stripes = spec.lock_stripes;
  for (size_t i = 0; i < spec.shape.size(); ++i) h.shape[i] = spec.shape[i];
  h.layout = layout;
  h.creator_pid = static_cast<int32_t>(::getpid());
  h.magic = kSegmentMagic;
}

}  // namespace

std::string Segment::shm_path(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 200;
  for (char c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
  }
  if (!ok) {
    throw std::invalid_argument("shared table name '" + name +
                                "' must be 1-200 characters of A-Z a-z 0-9 . _ -");
  }
  return "/pscore_hw_" + name;
}

std::unique_ptr<Segment> Segment::create(const std::string& name, const TableSpec& spec,
                                         const SegmentOptions& opts) {
  const std::string path = shm_path(name);
  const TableLayout layout = plan_layout(spec, sizeof(SegmentHeader));
  const std::string what = "create shared table '" + name + "'";
  Fd fd;
  for (int attempt = 0;; ++attempt) {
    fd.fd = ::shm_open(path.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd.fd >= 0) break;
    if (errno != EEXIST) throw Error(errno_message(what + ": shm_open " + path, errno));
    if (attempt == 0 && reclaim_if_stale(path)) continue;
    throw SegmentExists(what + ": the name is taken (/dev/shm" + path +
                        "); attach to it, or pick another name");
  }
  auto fail = [&](const std::string& msg, int err) {
    ::shm_unlink(path.c_str());
    throw Error(errno_message(what + ": " + msg, err));
  };
  // Before the file has a size, so an attacher that sees one also sees whether we live.
  if (!try_take_lease(fd.fd, kCreatorLease)) fail("leasing the new file", EAGAIN);
  if (::ftruncate(fd.fd, static_cast<off_t>(layout.total_bytes)) != 0) {
    fail("ftruncate to " + std::to_string(layout.total_bytes) + " bytes", errno);
  }
  // Reserve the pages now: a tmpfs that runs out later would SIGBUS on first touch instead.
  if (int rc = ::posix_fallocate(fd.fd, 0, static_cast<off_t>(layout.total_bytes)); rc != 0) {
    fail("reserving " + std::to_string(layout.total_bytes) + " bytes of /dev/shm", rc);
  }
  char* base = nullptr;
  try {
    base = map_fd(fd.fd, layout.total_bytes, opts.populate, what);
  } catch (...) {
    ::shm_unlink(path.c_str());
    throw;
  }
  write_header(*reinterpret_cast<SegmentHeader*>(base), spec, layout);
  std::unique_ptr<Segment> seg(new Segment(name, fd.release(), base, layout.total_bytes, true));
  seg->lock_timeout_ms_ = opts.lock_timeout_ms;
  seg->register_self(opts.lock_timeout_ms);
  return seg;
}

std::unique_ptr<Segment> Segment::attach(const std::string& name, const SegmentOptions& opts) {
  const std::string path = shm_path(name);
  const std::string what = "attach shared table '" + name + "'";
  Deadline wait(opts.wait_ms);
  for (int sleep_ms = 1;; sleep_ms = sleep_ms < 16 ? sleep_ms * 2 : 16) {
    Fd fd;
    fd.fd = ::shm_open(path.c_str(), O_RDWR, 0);
    if (fd.fd < 0) {
      if (errno != ENOENT) throw Error(errno_message(what + ": shm_open " + path, errno));
      if (wait.expired()) {
        throw SegmentMissing(
            what + ": no such table (/dev/shm" + path + " does not exist" +
            (opts.wait_ms > 0 ? " after " + std::to_string(opts.wait_ms) + " ms)" : ")"));
      }
      pause_ms(sleep_ms);
      continue;
    }
    Deadline ready(opts.ready_timeout_ms);
    struct stat st;
    while (::fstat(fd.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) < sizeof(SegmentHeader)) {
      if (ready.expired()) throw TimeoutError(what + ": its creator never sized it");
      pause_ms(1);
    }
    const uint64_t nbytes = static_cast<uint64_t>(st.st_size);
    char* base = map_fd(fd.fd, nbytes, opts.populate, what);
    std::unique_ptr<Segment> seg(new Segment(name, fd.release(), base, nbytes, false));
    seg->lock_timeout_ms_ = opts.lock_timeout_ms;
    SegmentHeader& h = seg->header();
    while (h.state.load(std::memory_order_acquire) == kInitializing) {
      if (!lease_held_elsewhere(seg->fd_, kCreatorLease)) {
        throw Error(what + ": its creator (pid " + std::to_string(h.creator_pid) +
                    ") died before finishing it");
      }
      if (ready.expired()) {
        throw TimeoutError(what + ": not ready after " + std::to_string(opts.ready_timeout_ms) +
                           " ms (creator pid " + std::to_string(h.creator_pid) + ")");
      }
      pause_ms(1);
    }
    if (h.magic != kSegmentMagic || h.version != kSegmentVersion) {
      throw Error(what + ": /dev/shm" + path + " is not a pscore table of version " +
                  std::to_string(kSegmentVersion));
    }
    if (h.layout.total_bytes != nbytes) {
      throw Error(what + ": segment holds " + std::to_string(nbytes) + " bytes, header says " +
                  std::to_string(h.layout.total_bytes));
    }
    seg->register_self(opts.lock_timeout_ms);
    if (!seg->detached()) return seg;
    // Removed between our open and registration: the name may be gone or point to a new table.
  }
}

bool Segment::remove(const std::string& name) {
  const std::string path = shm_path(name);
  Fd fd;
  fd.fd = ::shm_open(path.c_str(), O_RDWR, 0);
  if (fd.fd < 0) {
    if (errno == ENOENT) return false;
    throw Error(errno_message("remove shared table '" + name + "': shm_open", errno));
  }
  struct stat st;
  if (::fstat(fd.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= sizeof(SegmentHeader)) {
    char* base = map_fd(fd.fd, sizeof(SegmentHeader), false, "remove shared table '" + name + "'");
    auto& h = *reinterpret_cast<SegmentHeader*>(base);
    if (h.magic == kSegmentMagic) {
      RegistryGuard guard(fd.fd, 5000, "remove shared table '" + name + "'");
      remove_locked(h, path);
    }
    ::munmap(base, sizeof(SegmentHeader));
  }
  ::shm_unlink(path.c_str());  // no-op (ENOENT) when remove_locked did it
  return true;
}

Segment::~Segment() {
  try {
    detach();
  } catch (...) {
    // A registry that stays busy here leaves a registration; closing the file below drops its
    // lease, so the next reap clears it.
  }
  ::munmap(base_, nbytes_);
  ::close(fd_);
}

void Segment::register_self(int64_t lock_timeout_ms) {
  SegmentHeader& h = header();
  RegistryGuard guard(fd_, lock_timeout_ms, what("register"));
  if (h.state.load(std::memory_order_acquire) == kRemoved) return;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kMaxAttachments; ++i) {
      if (h.attached[i].load(std::memory_order_relaxed) != 0) continue;
      if (!try_take_lease(fd_, static_cast<uint64_t>(i))) continue;  // leased, not yet listed
      tag_ = make_tag(i, ++h.registrations);
      h.attached_pid[i] = static_cast<int32_t>(::getpid());
      h.attached[i].store(tag_, std::memory_order_relaxed);
      slot_ = i;
      owner_pid_ = h.attached_pid[i];
      generation_ = fork_generation();
      return;
    }
    reap_locked(h, fd_, -1);
  }
  throw Error(what("register") + ": " + std::to_string(kMaxAttachments) + " live handles already");
}

void Segment::rejoin_after_fork() {
  std::lock_guard<std::mutex> lk(rejoin_mu_);
  if (generation_ == fork_generation()) return;  // another thread of this child did it
  // The inherited descriptor shares its open file description, and so its leases, with the
  // parent: open the file anew for a registration that is this process's own.
  const std::string self_fd = "/proc/self/fd/" + std::to_string(fd_);
  const int fd = ::open(self_fd.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw Error(errno_message(what("reopen after fork") + ": " + self_fd, errno));
  ::close(fd_);  // the parent keeps its own descriptor, and with it its leases
  fd_ = fd;
  slot_ = -1;
  register_self(lock_timeout_ms_);
  if (detached()) {
    throw Error(what("lock rows of") + " in a forked child: the table was removed meanwhile");
  }
}

void Segment::detach() {
  // A forked child inherits the handle but not the registration: it must not release it.
  if (slot_ < 0 || owner_pid_ != static_cast<int32_t>(::getpid())) return;
  SegmentHeader& h = header();
  RegistryGuard guard(fd_, lock_timeout_ms_, what("detach"));
  h.attached[slot_].store(0, std::memory_order_relaxed);
  release_lease(fd_, static_cast<uint64_t>(slot_));
  slot_ = -1;
  if (h.state.load(std::memory_order_acquire) != kRemoved && reap_locked(h, fd_, -1) == 0) {
    remove_locked(h, shm_path(name_));
  }
}

void Segment::unlink() {
  SegmentHeader& h = header();
  RegistryGuard guard(fd_, lock_timeout_ms_, what("unlink"));
  if (h.state.load(std::memory_order_acquire) != kRemoved) remove_locked(h, shm_path(name_));
}

int Segment::live_attachments() {
  SegmentHeader& h = header();
  RegistryGuard guard(fd_, lock_timeout_ms_, what("count handles of"));
  return reap_locked(h, fd_, slot_);
}

bool Segment::holder_alive(int32_t tag) const {
  const int slot = slot_of(tag);
  if (slot < 0) return false;
  if (header().attached[slot].load(std::memory_order_relaxed) != tag) return false;
  return slot == slot_ || lease_held_elsewhere(fd_, static_cast<uint64_t>(slot));
}

std::string Segment::describe_holder(int32_t tag) const {
  const int slot = slot_of(tag);
  if (slot < 0) return "an unknown holder (tag " + std::to_string(tag) + ")";
  return "pid " + std::to_string(header().attached_pid[slot]) + " (handle slot " +
         std::to_string(slot) + ")";
}

void Segment::publish() { header().state.store(kReady, std::memory_order_release); }

std::string Segment::what(const char* op) const {
  return std::string(op) + " shared table '" + name_ + "'";
}

}  // namespace pscore::hogwild
