// Liveness the kernel vouches for. A process holds an open-file-description (OFD) lock on one
// byte of a table's segment file for as long as its handle lives, and the kernel drops the lock
// when the process dies, however it dies. Every process that maps the file sees the lock,
// whatever pid namespace it runs in; pids are not (they differ across namespaces and are
// reused). The locks are advisory: they do not touch the bytes, which stay ordinary memory.
#pragma once

#include <cstdint>
#include <string>

namespace pscore::hogwild {

// Takes a write lease on byte `index` of `fd` without waiting; false when another open file
// description holds it. Throws Error on other failures.
bool try_take_lease(int fd, uint64_t index);

// Takes byte `index`, polling until timeout_ms (< 0: forever); throws TimeoutError naming
// `what` when it stays held.
void take_lease(int fd, uint64_t index, int64_t timeout_ms, const std::string& what);

// Releases this description's lease on byte `index` (a no-op when it holds none).
void release_lease(int fd, uint64_t index);

// True when an open file description other than fd's holds byte `index`, i.e. a live process
// (or a fork of one) still holds it.
bool lease_held_elsewhere(int fd, uint64_t index);

}  // namespace pscore::hogwild
