// Pinned (page-locked) host blocks that CUDA copies stage through, kept and reused across
// operations. A block goes back to the pool with an event recorded after the last copy queued
// on it, and is handed out again (or freed) only once that event has completed: a block is never
// reused or freed while a copy may still read or write it.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/cuda_runtime.h"

namespace pscore::gpu {

class PinnedPool {
 public:
  struct Block {
    void* data = nullptr;
    size_t bytes = 0;
    CudaEvent last_use = nullptr;  // recorded after the last copy queued on the block
    int event_device = -1;         // the device last_use belongs to
    bool leased = false;
    bool lost = false;  // its last use could not be recorded: never reused, never freed
  };

  PinnedPool() = default;
  ~PinnedPool();  // frees the blocks whose copies are done; leaves the others (never loads CUDA)
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A block of at least `bytes` with no copy left on it: a kept one when one fits, else a new
  // one (cudaHostAlloc). `what` names the operation in errors.
  Block* lease(size_t bytes, const std::string& what);
  // Gives `block` back: reusable once `stream` (on `device`) passes the copies queued on it so
  // far. Never throws: a block whose use cannot be recorded is kept out of use for good.
  void release(Block* block, CudaStream stream, int device) noexcept;

  size_t block_count() const;
  size_t pinned_bytes() const;

 private:
  // Whether nothing queued still uses `block` (with mu_ held).
  static bool idle(const CudaRuntime& cuda, const Block& block, const std::string& what);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Block>> blocks_;
};

}  // namespace pscore::gpu
