#include "hogwild/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <stdexcept>
#include <thread>

#include "common/clock.h"

namespace pscore::hogwild {
namespace {

void pause_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// An open descriptor that closes itself.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

char* map_fd(int fd, uint64_t nbytes, bool populate, const std::string& what) {
  int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  void* p = ::mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED)
    throw Error(errno_message(what + ": mmap of " + std::to_string(nbytes) + " bytes", errno));
  return static_cast<char*>(p);
}

// Reaps dead pids from the registry; returns the live count. Caller holds registry_lock.
int reap_locked(SegmentHeader& h) {
  int live = 0;
  for (auto& slot : h.attached) {
    int32_t pid = slot.load(std::memory_order_relaxed);
    if (pid == 0) continue;
    if (pid_alive(pid)) {
      ++live;
    } else {
      slot.store(0, std::memory_order_relaxed);
    }
  }
  return live;
}

// Marks the segment removed and unlinks its name. Caller holds registry_lock.
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
    LockGuard guard(h.registry_lock, 5000, "reclaim stale shared table");
    uint32_t state = h.state.load(std::memory_order_acquire);
    if (state == kRemoved) {
      stale = true;
    } else if (state == kInitializing) {
      stale = !pid_alive(h.creator_pid);
    } else {
      stale = reap_locked(h) == 0;
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
  h.creator_pid = self_pid();
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
  std::unique_ptr<Segment> seg(new Segment(name, base, layout.total_bytes, true));
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
    std::unique_ptr<Segment> seg(new Segment(name, base, nbytes, false));
    seg->lock_timeout_ms_ = opts.lock_timeout_ms;
    SegmentHeader& h = seg->header();
    while (h.state.load(std::memory_order_acquire) == kInitializing) {
      if (h.magic == kSegmentMagic && !pid_alive(h.creator_pid)) {
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
      LockGuard guard(h.registry_lock, 5000, "remove shared table");
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
    // A registry lock that times out here leaves a registration the next detach reaps.
  }
  ::munmap(base_, nbytes_);
}

void Segment::register_self(int64_t lock_timeout_ms) {
  SegmentHeader& h = header();
  const int32_t me = self_pid();
  LockGuard guard(h.registry_lock, lock_timeout_ms, what("register").c_str());
  if (h.state.load(std::memory_order_acquire) == kRemoved) return;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kMaxAttachments; ++i) {
      if (h.attached[i].load(std::memory_order_relaxed) == 0) {
        h.attached[i].store(me, std::memory_order_relaxed);
        slot_ = i;
        owner_pid_ = me;
        return;
      }
    }
    reap_locked(h);
  }
  throw Error(what("register") + ": " + std::to_string(kMaxAttachments) + " live handles already");
}

void Segment::detach() {
  // A forked child inherits the handle but not the registration: it must not release it.
  if (slot_ < 0 || owner_pid_ != self_pid()) return;
  SegmentHeader& h = header();
  LockGuard guard(h.registry_lock, lock_timeout_ms_, what("detach").c_str());
  h.attached[slot_].store(0, std::memory_order_relaxed);
  slot_ = -1;
  if (h.state.load(std::memory_order_acquire) != kRemoved && reap_locked(h) == 0) {
    remove_locked(h, shm_path(name_));
  }
}

void Segment::unlink() {
  SegmentHeader& h = header();
  LockGuard guard(h.registry_lock, lock_timeout_ms_, what("unlink").c_str());
  if (h.state.load(std::memory_order_acquire) != kRemoved) remove_locked(h, shm_path(name_));
}

int Segment::live_attachments() {
  SegmentHeader& h = header();
  LockGuard guard(h.registry_lock, lock_timeout_ms_, what("count handles of").c_str());
  return reap_locked(h);
}

void Segment::publish() { header().state.store(kReady, std::memory_order_release); }

std::string Segment::what(const char* op) const {
  return std::string(op) + " shared table '" + name_ + "'";
}

}  // namespace pscore::hogwild
