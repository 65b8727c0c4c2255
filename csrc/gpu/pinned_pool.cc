#include "gpu/pinned_pool.h"

namespace pscore::gpu {

namespace {

constexpr size_t kMinBlockBytes = 64 << 10;

// Sizes grow in powers of two so that buffers of nearby sizes share blocks.
size_t block_size(size_t bytes) {
  size_t size = kMinBlockBytes;
  while (size < bytes) size *= 2;
  return size;
}

}  // namespace

PinnedPool::~PinnedPool() {
  if (blocks_.empty()) return;
  const CudaRuntime& cuda = cuda_runtime();  // loaded: a block exists
  for (auto& block : blocks_) {
    if (block->lost || block->leased) continue;
    if (block->last_use && cuda.cudaEventQuery(block->last_use) != kCudaSuccess) continue;
    if (block->last_use) cuda.cudaEventDestroy(block->last_use);
    cuda.cudaFreeHost(block->data);  // at exit the runtime may be gone: nothing to do then
  }
}

bool PinnedPool::idle(const CudaRuntime& cuda, const Block& block, const std::string& what) {
  if (block.leased || block.lost) return false;
  if (!block.last_use) return true;
  const CudaStatus status = cuda.cudaEventQuery(block.last_use);
  if (status == kCudaNotReady) return false;
  cuda.check(status, what + ": cudaEventQuery (a staging buffer's last copy)");
  return true;
}

PinnedPool::Block* PinnedPool::lease(size_t bytes, const std::string& what) {
  const CudaRuntime& cuda = cuda_runtime();
  std::lock_guard<std::mutex> lock(mu_);
  Block* best = nullptr;
  for (auto& block : blocks_) {
    if (block->bytes < bytes || (best && best->bytes <= block->bytes)) continue;
    if (idle(cuda, *block, what)) best = block.get();
  }
  if (!best) {
    auto block = std::make_unique<Block>();
    block->bytes = block_size(bytes);
    cuda.check(cuda.cudaHostAlloc(&block->data, block->bytes, kHostAllocPortable),
               what + ": cudaHostAlloc of " + std::to_string(block->bytes) +
                   " bytes of pinned staging memory");
    best = block.get();
    blocks_.push_back(std::move(block));
  }
  best->leased = true;
  return best;
}

void PinnedPool::release(Block* block, CudaStream stream, int device) noexcept {
  const CudaRuntime& cuda = cuda_runtime();  // loaded: the block was leased
  std::lock_guard<std::mutex> lock(mu_);
  block->leased = false;
  if (block->last_use && block->event_device != device) {
    // An event records only on its own device's streams; the old one is done (it was idle).
    cuda.cudaEventDestroy(block->last_use);
    block->last_use = nullptr;
  }
  if (!block->last_use &&
      cuda.cudaEventCreateWithFlags(&block->last_use, kEventDisableTiming) != kCudaSuccess) {
    block->last_use = nullptr;
    block->lost = true;
    return;
  }
  block->event_device = device;
  if (cuda.cudaEventRecord(block->last_use, stream) != kCudaSuccess) block->lost = true;
}

size_t PinnedPool::block_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocks_.size();
}

size_t PinnedPool::pinned_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& block : blocks_) total += block->bytes;
  return total;
}

}  // namespace pscore::gpu
