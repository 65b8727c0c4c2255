#include "gpu/staging.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "common/error.h"

namespace pscore::gpu {

namespace {

constexpr size_t kSlots = 3;  // chunks in flight: one in the host operation, two copying in
constexpr std::chrono::microseconds kSpin{200};  // how long a wait for a copy polls unslept
// Host-to-device copies below this size go as 2D copies of several rows: on an H100 shared by two
// processes a flat one ran ~150-300 us (against ~13 us alone, and ~20 us from 32 KB up), a 2D one
// of 16 rows ~13 us (measured 2026-11-26, docs/gpu.md).
constexpr size_t kSmallCopyBytes = 32 << 10;
std::atomic<size_t> chunk_bytes{4 << 20};

bool has(Copy copy, Copy part) { return (static_cast<int>(copy) & static_cast<int>(part)) != 0; }

// The rows a small copy to the device is cut into: up to 16, equal; 1 when no cut divides it.
size_t copy_rows(size_t bytes) {
  for (size_t rows = 16; rows >= 2; --rows) {
    if (bytes % rows == 0) return rows;
  }
  return 1;
}

const char* copy_name(CopyKind kind) {
  return kind == CopyKind::kDeviceToHost ? "cudaMemcpyAsync device to host"
                                         : "cudaMemcpyAsync host to device";
}

}  // namespace

void set_staging_chunk_bytes(size_t bytes) {
  if (bytes == 0) throw std::invalid_argument("the staging chunk size must be at least 1 byte");
  chunk_bytes.store(bytes);
}

size_t staging_chunk_bytes() { return chunk_bytes.load(); }

bool on_cuda(const std::vector<const BufferView*>& buffers, const std::string& what) {
  const BufferView* cuda = nullptr;
  const BufferView* host = nullptr;
  for (const BufferView* b : buffers) {
    if (b->on_host()) {
      host = host ? host : b;
    } else if (!cuda) {
      cuda = b;
    } else if (b->device_index != cuda->device_index) {
      throw std::invalid_argument(what + ": tensors on " + device_string(*cuda) + " and " +
                                  device_string(*b) +
                                  " in one call; pass every tensor on one device");
    } else if (b->stream != cuda->stream) {
      throw std::invalid_argument(what + ": tensors ordered on two CUDA streams (" +
                                  std::to_string(cuda->stream) + " and " +
                                  std::to_string(b->stream) + ") in one call");
    }
  }
  if (cuda && host) {
    throw std::invalid_argument(what + ": tensors on " + device_string(*cuda) +
                                " and cpu in one call; pass every tensor on one device");
  }
  return cuda != nullptr;
}

StagedOp::StagedOp(PinnedPool& pool, const BufferView& first, std::string what, int64_t timeout_ms)
    : cuda_(cuda_runtime()),
      pool_(pool),
      what_(std::move(what)),
      timeout_ms_(timeout_ms),
      device_(first.device_index),
      stream_(reinterpret_cast<CudaStream>(first.stream)),
      device_scope_(cuda_, device_, what_) {}

StagedOp::~StagedOp() {
  for (PinnedPool::Block* block : leased_) pool_.release(block, stream_, device_);
  for (CudaEvent event : events_) cuda_.cudaEventDestroy(event);  // CUDA lets a pending one go
}

PinnedPool::Block* StagedOp::lease(size_t bytes) {
  PinnedPool::Block* block = pool_.lease(bytes, what_);
  leased_.push_back(block);
  return block;
}

CudaEvent StagedOp::new_event() {
  CudaEvent event = nullptr;
  cuda_.check(cuda_.cudaEventCreateWithFlags(&event, kEventDisableTiming),
              what_ + ": cudaEventCreateWithFlags");
  events_.push_back(event);
  return event;
}

void StagedOp::copy_async(void* dst, const void* src, size_t bytes, CopyKind kind) {
  cuda_.check(cuda_.cudaMemcpyAsync(dst, src, bytes, kind, stream_),
              what_ + ": " + copy_name(kind) + " of " + std::to_string(bytes) + " bytes");
}

void StagedOp::copy_to_device(void* dst, const void* src, size_t bytes) {
  const size_t rows = bytes < kSmallCopyBytes ? copy_rows(bytes) : 1;
  if (rows == 1) {
    copy_async(dst, src, bytes, CopyKind::kHostToDevice);
    return;
  }
  const size_t width = bytes / rows;
  cuda_.check(cuda_.cudaMemcpy2DAsync(dst, width, src, width, width, rows, CopyKind::kHostToDevice,
                                      stream_),
              what_ + ": cudaMemcpy2DAsync host to device of " + std::to_string(rows) +
                  " rows of " + std::to_string(width) + " bytes");
}

void StagedOp::record(CudaEvent event) {
  cuda_.check(cuda_.cudaEventRecord(event, stream_), what_ + ": cudaEventRecord");
}

void StagedOp::wait(CudaEvent event) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    const CudaStatus status = cuda_.cudaEventQuery(event);
    if (status == kCudaSuccess) return;
    if (status != kCudaNotReady) {
      cuda_.check(status, what_ + ": cudaEventQuery (waiting for the copy to host memory)");
    }
    const auto waited = Clock::now() - start;
    if (timeout_ms_ >= 0 &&
        std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() >= timeout_ms_) {
      throw TimeoutError(what_ + ": the copy of cuda:" + std::to_string(device_) +
                         " memory to the host did not finish within " +
                         std::to_string(timeout_ms_) +
                         " ms (the caller's CUDA stream is stuck behind earlier work)");
    }
    // A small copy lands within tens of microseconds: yield until kSpin has passed, then sleep
    // in growing steps so a stuck stream costs no core.
    if (waited < kSpin) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(20));
  }
}

void* StagedOp::stage(const BufferView& buffer, Copy copy) {
  if (buffer.nbytes == 0) return buffer.data;
  PinnedPool::Block* block = lease(buffer.nbytes);
  if (has(copy, Copy::kIn)) {
    copy_async(block->data, buffer.data, buffer.nbytes, CopyKind::kDeviceToHost);
  }
  staged_.push_back({block, &buffer, copy});
  return block->data;
}

void StagedOp::wait_copies_in() {
  const bool any = std::any_of(staged_.begin(), staged_.end(),
                               [](const Staged& s) { return has(s.copy, Copy::kIn); });
  if (!any) return;
  CudaEvent done = new_event();
  record(done);
  wait(done);
}

void StagedOp::copy_out() {
  for (const Staged& s : staged_) {
    if (has(s.copy, Copy::kOut)) {
      copy_to_device(s.buffer->data, s.block->data, s.buffer->nbytes);
    }
  }
}

void StagedOp::run_chunked(const BufferView& buffer, Copy copy,
                           const std::function<void(void*, size_t)>& op) {
  const size_t item = dtype_size(buffer.dtype);
  const size_t per_chunk = std::max<size_t>(1, staging_chunk_bytes() / item);
  const size_t chunks = (buffer.numel + per_chunk - 1) / per_chunk;
  const size_t slots = std::min(chunks, kSlots);
  std::vector<PinnedPool::Block*> block(slots);
  std::vector<CudaEvent> copied(slots);  // recorded after the last copy queued on the slot
  for (size_t i = 0; i < slots; ++i) {
    block[i] = lease(std::min(buffer.numel, per_chunk) * item);
    copied[i] = new_event();
  }
  char* device = static_cast<char*>(buffer.data);
  auto count_of = [&](size_t k) { return std::min(per_chunk, buffer.numel - k * per_chunk); };
  auto copy_in = [&](size_t k) {
    copy_async(block[k % slots]->data, device + k * per_chunk * item, count_of(k) * item,
               CopyKind::kDeviceToHost);
    record(copied[k % slots]);
  };
  std::vector<bool> recorded(slots, false);
  if (has(copy, Copy::kIn)) {
    for (size_t k = 0; k < slots; ++k) copy_in(k), recorded[k] = true;
  }
  for (size_t k = 0; k < chunks; ++k) {
    const size_t slot = k % slots;
    if (recorded[slot]) wait(copied[slot]);  // its copy-in, or the copy-out of chunk k - slots
    op(block[slot]->data, count_of(k));
    if (has(copy, Copy::kOut)) {
      copy_to_device(device + k * per_chunk * item, block[slot]->data, count_of(k) * item);
      record(copied[slot]);
      recorded[slot] = true;
    }
    if (has(copy, Copy::kIn) && k + slots < chunks) copy_in(k + slots);
  }
}

void run_staged(PinnedPool& pool, const std::vector<const BufferView*>& buffers,
                const std::vector<Copy>& copies, const std::string& what, int64_t timeout_ms,
                const std::function<void(const std::vector<void*>&)>& op) {
  std::vector<void*> host;
  host.reserve(buffers.size());
  if (!on_cuda(buffers, what)) {
    for (const BufferView* b : buffers) host.push_back(b->data);
    op(host);
    return;
  }
  StagedOp staged(pool, *buffers.front(), what, timeout_ms);
  for (size_t i = 0; i < buffers.size(); ++i) host.push_back(staged.stage(*buffers[i], copies[i]));
  staged.wait_copies_in();
  op(host);
  staged.copy_out();
}

void run_in_place(PinnedPool& pool, const BufferView& buffer, Copy copy, const std::string& what,
                  int64_t timeout_ms, const std::function<void(void*, size_t)>& op) {
  if (buffer.on_host() || buffer.numel == 0) {
    op(buffer.data, buffer.numel);
    return;
  }
  StagedOp staged(pool, buffer, what, timeout_ms);
  staged.run_chunked(buffer, copy, op);
}

}  // namespace pscore::gpu
