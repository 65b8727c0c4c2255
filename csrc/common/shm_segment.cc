#include "common/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/error.h"

namespace pscore {

ShmSegment::~ShmSegment() { release(); }

ShmSegment::ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    data_ = o.data_;
    nbytes_ = o.nbytes_;
    owner_ = o.owner_;
    unlinked_ = o.unlinked_;
    o.data_ = nullptr;
    o.nbytes_ = 0;
    o.owner_ = false;
  }
  return *this;
}

void ShmSegment::release() {
  if (owner_) unlink();
  if (data_) ::munmap(data_, nbytes_);
  data_ = nullptr;
}

namespace {
int map_flags(bool prefault) { return MAP_SHARED | (prefault ? MAP_POPULATE : 0); }
}  // namespace

ShmSegment ShmSegment::create(const std::string& name, size_t nbytes, bool prefault) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(errno_message("shm_open(" + name + ")", errno));
  ShmSegment seg;
  seg.name_ = name;
  seg.owner_ = true;
  if (::ftruncate(fd, static_cast<off_t>(nbytes)) != 0) {
    int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw Error(errno_message(
        "ftruncate of shared memory " + name + " to " + std::to_string(nbytes) + " bytes", err));
  }
  if (prefault) {
    const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(nbytes));
    if (err != 0) {
      ::close(fd);
      ::shm_unlink(name.c_str());
      throw Error(errno_message("allocating " + std::to_string(nbytes) +
                                    " bytes of shared memory " + name + " (is /dev/shm full?)",
                                err));
    }
  }
  void* p = ::mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, map_flags(prefault), fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    throw Error(errno_message("mmap of shared memory " + name, errno));
  }
  seg.data_ = p;
  seg.nbytes_ = nbytes;
  return seg;
}

ShmSegment ShmSegment::open(const std::string& name, bool prefault) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw NetworkError(errno_message("shm_open(" + name + ")", errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw NetworkError(errno_message("fstat of shared memory " + name, err));
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE,
                   map_flags(prefault), fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw NetworkError(errno_message("mmap of shared memory " + name, errno));
  ShmSegment seg;
  seg.name_ = name;
  seg.data_ = p;
  seg.nbytes_ = static_cast<size_t>(st.st_size);
  return seg;
}

void ShmSegment::unlink() {
  if (!owner_ || unlinked_) return;
  ::shm_unlink(name_.c_str());
  unlinked_ = true;
}

}  // namespace pscore
