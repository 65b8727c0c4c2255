#include "ps/durability/update_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>

#include "common/error.h"
#include "common/fd.h"

namespace pscore::ps {
namespace {

constexpr uint32_t kLogMagic = 0x4c575350;  // "PSWL"

#pragma pack(push, 1)
struct RecordHeader {
  uint32_t magic = kLogMagic;
  uint8_t kind = 0;
  uint8_t reserved[3] = {0, 0, 0};
  uint64_t index = 0;
  uint64_t length = 0;
};
#pragma pack(pop)

uint32_t checksum(const std::vector<std::pair<const void*, size_t>>& parts) {
  uint32_t h = 2166136261u;
  for (const auto& [p, n] : parts) {
    auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 16777619u;
  }
  return h;
}

void write_fully(int fd, std::vector<iovec>& iov, const std::string& path) {
  size_t at = 0;
  while (at < iov.size()) {
    ssize_t k =
        ::writev(fd, iov.data() + at, static_cast<int>(std::min<size_t>(iov.size() - at, 1024)));
    if (k < 0) {
      if (errno == EINTR) continue;
      throw Error(errno_message("write-ahead log " + path + ": write", errno));
    }
    size_t left = static_cast<size_t>(k);
    while (at < iov.size() && left >= iov[at].iov_len) left -= iov[at++].iov_len;
    if (at < iov.size()) {
      iov[at].iov_base = static_cast<char*>(iov[at].iov_base) + left;
      iov[at].iov_len -= left;
    }
  }
}

// Copies bytes [from, to) of `src` into a new file `dst`, synced to disk; removes dst and throws
// Error on failure.
void copy_tail(const std::string& src, uint64_t from, uint64_t to, const std::string& dst) {
  const std::string what = "write-ahead log " + src + ": copying its tail to " + dst;
  try {
    Fd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
    Fd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (in.fd < 0 || out.fd < 0) throw Error(errno_message(what + ": open", errno));
    std::vector<char> buf(1 << 20);
    for (uint64_t at = from; at < to;) {
      const ssize_t n = ::pread(in.fd, buf.data(), std::min<uint64_t>(buf.size(), to - at),
                                static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error(errno_message(what + ": read", n == 0 ? EIO : errno));
      std::vector<iovec> iov{{buf.data(), static_cast<size_t>(n)}};
      write_fully(out.fd, iov, dst);
      at += static_cast<uint64_t>(n);
    }
    if (::fdatasync(out.fd) != 0) throw Error(errno_message(what + ": fdatasync", errno));
  } catch (...) {
    ::unlink(dst.c_str());
    throw;
  }
}

}  // namespace

UpdateLog::UpdateLog(const std::string& path, uint64_t first_index, bool fsync_each)
    : path_(path), fsync_each_(fsync_each), next_index_(first_index) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(errno_message("cannot open write-ahead log " + path, errno));
  bytes_ = size_locked();
}

UpdateLog::~UpdateLog() {
  if (fd_ >= 0) ::close(fd_);
}

void UpdateLog::append(LogKind kind, const std::vector<std::pair<const void*, size_t>>& parts) {
  std::lock_guard<std::mutex> lk(mu_);
  RecordHeader h;
  h.kind = static_cast<uint8_t>(kind);
  h.index = next_index_;
  for (const auto& part : parts) h.length += part.second;
  uint32_t sum = checksum(parts);
  std::vector<iovec> iov;
  iov.push_back({&h, sizeof(h)});
  for (const auto& [p, n] : parts)
    if (n) iov.push_back({const_cast<void*>(p), n});
  iov.push_back({&sum, sizeof(sum)});
  const uint64_t end = bytes_.load(std::memory_order_relaxed);
  try {
    write_fully(fd_, iov, path_);
    if (fsync_each_ && ::fdatasync(fd_) != 0)
      throw Error(errno_message("write-ahead log " + path_ + ": fdatasync", errno));
  } catch (...) {
    roll_back(end);
    throw;
  }
  bytes_.fetch_add(sizeof(h) + h.length + sizeof(sum), std::memory_order_relaxed);
  ++next_index_;
}

// A record the disk could not take whole (ENOSPC mid-write) is cut off again: left in place, it
// would end the replay there and hide every record appended after it once space is freed.
void UpdateLog::roll_back(uint64_t end) {
  if (::ftruncate(fd_, static_cast<off_t>(end)) != 0)
    throw Error(errno_message("write-ahead log " + path_ + ": cutting a failed record off at " +
                                  std::to_string(end) + " bytes",
                              errno));
}

uint64_t UpdateLog::size_locked() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0)
    throw Error(errno_message("write-ahead log " + path_ + ": fstat", errno));
  return static_cast<uint64_t>(st.st_size);
}

UpdateLog::Mark UpdateLog::mark() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {next_index_, size_locked()};
}

void UpdateLog::drop_before(const Mark& m) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t size = size_locked();
  if (m.offset == 0) return;
  if (m.offset >= size) {  // nothing appended since the mark
    if (::ftruncate(fd_, 0) != 0)
      throw Error(errno_message("write-ahead log " + path_ + ": truncate", errno));
    bytes_ = 0;
    return;
  }
  const std::string tmp = path_ + ".tmp";
  copy_tail(path_, m.offset, size, tmp);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0 || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(errno_message("write-ahead log " + path_ + ": replacing it", err));
  }
  ::close(fd_);
  fd_ = fd;
  bytes_ = size - m.offset;
}

uint64_t UpdateLog::replay(const std::string& path, uint64_t from_index,
                           const std::function<void(LogKind, uint64_t, WireReader&)>& fn,
                           uint64_t* intact_bytes) {
  std::ifstream in(path, std::ios::binary);
  uint64_t next = from_index;
  *intact_bytes = 0;
  if (!in) return next;
  in.seekg(0, std::ios::end);
  const uint64_t file_bytes = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  std::vector<uint8_t> payload;
  for (;;) {
    RecordHeader h;
    if (!in.read(reinterpret_cast<char*>(&h), sizeof(h))) break;
    // A length past the end of the file is a torn (or garbled) tail: stop before allocating it.
    const uint64_t left = file_bytes - *intact_bytes - sizeof(h);
    if (h.magic != kLogMagic || left < sizeof(uint32_t) || h.length > left - sizeof(uint32_t))
      break;
    payload.resize(h.length);
    uint32_t sum = 0;
    if (!in.read(reinterpret_cast<char*>(payload.data()), static_cast<std::streamsize>(h.length)))
      break;
    if (!in.read(reinterpret_cast<char*>(&sum), sizeof(sum))) break;
    if (sum != checksum({{payload.data(), payload.size()}})) break;
    *intact_bytes += sizeof(h) + h.length + sizeof(sum);
    if (h.index < from_index) continue;
    WireReader r(payload.data(), payload.size(), "write-ahead log record");
    fn(static_cast<LogKind>(h.kind), h.index, r);
    next = h.index + 1;
  }
  return next;
}

}  // namespace pscore::ps
