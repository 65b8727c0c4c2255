// Reads and writes another process's memory in one copy (process_vm_readv / process_vm_writev,
// "cross-memory attach"): the single-copy path of the shared-memory transport for large messages.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace pscore {

// Copies n bytes at `address` in process `pid` to dst. Returns how many were copied (at least 1
// unless n is 0); throws NetworkError naming `peer_name` when the process is gone or the range
// is no longer mapped (the peer died or broke the protocol).
size_t read_process_memory(pid_t pid, uint64_t address, void* dst, size_t n,
                           const std::string& peer_name);

// Copies n bytes from src to `address` in process `pid`. Returns and throws as the read does.
size_t write_process_memory(pid_t pid, uint64_t address, const void* src, size_t n,
                            const std::string& peer_name);

// Whether this process may read process `pid`'s memory: reads the 8 bytes at `address` and
// compares them with `expected`. False (never an error) when Yama's ptrace_scope, seccomp, a
// container or another pid namespace forbids it.
bool can_read_process_memory(pid_t pid, uint64_t address, uint64_t expected);

// Whether this process may write process `pid`'s memory: writes `unchanged`, the value the 8
// bytes at `address` already hold, back over them. False (never an error) where it may not.
bool can_write_process_memory(pid_t pid, uint64_t address, uint64_t unchanged);

}  // namespace pscore
