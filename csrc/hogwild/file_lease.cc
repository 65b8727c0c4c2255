#include "hogwild/file_lease.h"

#include <fcntl.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "common/clock.h"
#include "common/error.h"

namespace pscore::hogwild {
namespace {

struct flock byte_lock(short type, uint64_t index) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(index);
  fl.l_len = 1;
  fl.l_pid = 0;  // required by the OFD commands
  return fl;
}

int fcntl_retrying(int fd, int cmd, struct flock* fl) {
  int rc;
  do {
    rc = ::fcntl(fd, cmd, fl);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

}  // namespace

bool try_take_lease(int fd, uint64_t index) {
  struct flock fl = byte_lock(F_WRLCK, index);
  if (fcntl_retrying(fd, F_OFD_SETLK, &fl) == 0) return true;
  if (errno == EAGAIN || errno == EACCES) return false;
  throw Error(errno_message("shared table lease " + std::to_string(index) + ": fcntl", errno));
}

void take_lease(int fd, uint64_t index, int64_t timeout_ms, const std::string& what) {
  Deadline deadline(timeout_ms);
  for (int sleep_us = 50; !try_take_lease(fd, index);
       sleep_us = sleep_us < 2000 ? sleep_us * 2 : 2000) {
    if (deadline.expired()) {
      throw TimeoutError(what + ": another process held its lock for more than " +
                         std::to_string(timeout_ms) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
  }
}

void release_lease(int fd, uint64_t index) {
  struct flock fl = byte_lock(F_UNLCK, index);
  fcntl_retrying(fd, F_OFD_SETLK, &fl);
}

bool lease_held_elsewhere(int fd, uint64_t index) {
  struct flock fl = byte_lock(F_WRLCK, index);
  if (fcntl_retrying(fd, F_OFD_GETLK, &fl) != 0) {
    throw Error(errno_message("shared table lease " + std::to_string(index) + ": fcntl", errno));
  }
  return fl.l_type != F_UNLCK;
}

}  // namespace pscore::hogwild
