// Which side of a fork() this process is on: a number that changes in the child. A handle
// inherited across a fork compares it with the one it registered under and, being in a new
// process, registers again before it takes locks as that process.
#pragma once

#include <cstdint>

namespace pscore::hogwild {

// Cheap (one relaxed load): forks counted by a pthread_atfork child handler.
uint64_t fork_generation();

}  // namespace pscore::hogwild
