#include "hogwild/fork_generation.h"

#include <pthread.h>

#include <atomic>

namespace pscore::hogwild {
namespace {

std::atomic<uint64_t> generation{0};

struct CountForks {
  CountForks() {
    ::pthread_atfork(nullptr, nullptr, [] { generation.fetch_add(1, std::memory_order_relaxed); });
  }
};
CountForks count_forks;

}  // namespace

uint64_t fork_generation() { return generation.load(std::memory_order_relaxed); }

}  // namespace pscore::hogwild
