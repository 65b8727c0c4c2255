#include "transport/shm/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace pscore {

namespace {
size_t cross_copy(bool read, pid_t pid, uint64_t address, void* local_bytes, size_t n,
                  const std::string& peer_name) {
  if (n == 0) return 0;
  iovec local{local_bytes, n};
  iovec remote{reinterpret_cast<void*>(address), n};
  for (;;) {
    ssize_t k = read ? ::process_vm_readv(pid, &local, 1, &remote, 1, 0)
                     : ::process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (k > 0) return static_cast<size_t>(k);
    if (k < 0 && errno == EINTR) continue;
    const int err = k < 0 ? errno : EFAULT;
    throw NetworkError(
        peer_name + " (pid " + std::to_string(pid) + "): " + (read ? "reading" : "writing") +
        " its buffer failed: " + std::strerror(err) + (err == ESRCH ? " (it died)" : ""));
  }
}
}  // namespace

size_t read_process_memory(pid_t pid, uint64_t address, void* dst, size_t n,
                           const std::string& peer_name) {
  return cross_copy(true, pid, address, dst, n, peer_name);
}

size_t write_process_memory(pid_t pid, uint64_t address, const void* src, size_t n,
                            const std::string& peer_name) {
  return cross_copy(false, pid, address, const_cast<void*>(src), n, peer_name);
}

bool can_read_process_memory(pid_t pid, uint64_t address, uint64_t expected) {
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(address), sizeof got};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof got) &&
         got == expected;
}

bool can_write_process_memory(pid_t pid, uint64_t address, uint64_t unchanged) {
  iovec local{&unchanged, sizeof unchanged};
  iovec remote{reinterpret_cast<void*>(address), sizeof unchanged};
  return ::process_vm_writev(pid, &local, 1, &remote, 1, 0) ==
         static_cast<ssize_t>(sizeof unchanged);
}

}  // namespace pscore
