#include "transport/shm/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace pscore {

size_t read_process_memory(pid_t pid, uint64_t address, void* dst, size_t n,
                           const std::string& peer_name) {
  if (n == 0) return 0;
  iovec local{dst, n};
  iovec remote{reinterpret_cast<void*>(address), n};
  for (;;) {
    ssize_t k = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (k > 0) return static_cast<size_t>(k);
    if (k < 0 && errno == EINTR) continue;
    const int err = k < 0 ? errno : EFAULT;
    throw NetworkError(peer_name + " (pid " + std::to_string(pid) +
                       "): reading its buffer failed: " + std::strerror(err) +
                       (err == ESRCH ? " (it died)" : ""));
  }
}

bool can_read_process_memory(pid_t pid, uint64_t address, uint64_t expected) {
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(address), sizeof got};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof got) &&
         got == expected;
}

}  // namespace pscore
