// CUDA buffers through host code: the bytes of an operation's CUDA buffers are copied into pinned
// host blocks (gpu/pinned_pool.h), the host operation (a TCP or shared-memory collective, a
// parameter-server request) runs on the blocks, and the results are copied back. Every copy is
// queued on the caller's stream (BufferView::stream), so the copy-in runs after the work queued
// there before the call and a kernel queued there after the call sees the copy-out, as with
// torch's NCCL backend. The calling thread waits for the copy-in (up to a timeout), not for the
// copy-out. Large in-place buffers move in chunks: the copy-in of the next chunks overlaps the
// host operation on the current one, and each chunk's copy-out follows right behind it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/buffer_view.h"
#include "gpu/cuda_runtime.h"
#include "gpu/pinned_pool.h"

namespace pscore::gpu {

// Which way a CUDA buffer's bytes cross for a staged operation.
enum class Copy : int { kNone = 0, kIn = 1, kOut = 2, kInOut = 3 };

// The chunk size of staged in-place operations (every rank must use the same: a chunk is one
// host collective); Python sets it from PSCORE_STAGING_CHUNK_BYTES.
void set_staging_chunk_bytes(size_t bytes);
size_t staging_chunk_bytes();

// True when every buffer is on one CUDA device with one stream, false when every one is in host
// memory; std::invalid_argument naming `what` and both devices when they are mixed.
bool on_cuda(const std::vector<const BufferView*>& buffers, const std::string& what);

// One staged operation, on the stream and device of the CUDA buffers it stages. The
// destructor gives the blocks back to the pool, reusable once the stream has passed every copy
// queued on them (also after a failure: a copy still queued never meets a reused block).
class StagedOp {
 public:
  StagedOp(PinnedPool& pool, const BufferView& first, std::string what, int64_t timeout_ms);
  ~StagedOp();
  StagedOp(const StagedOp&) = delete;
  StagedOp& operator=(const StagedOp&) = delete;

  // Host memory standing for `buffer` (of this op's device): a pinned block, its copy-in queued
  // when `copy` has kIn, its copy-out queued by copy_out() when `copy` has kOut.
  void* stage(const BufferView& buffer, Copy copy);
  // Blocks until every copy-in queued so far is done; pscore::TimeoutError past the timeout.
  void wait_copies_in();
  // Queues the copy-out of every buffer staged with kOut.
  void copy_out();

  // The in-place path, chunk by chunk: op(host, count) on each chunk of `buffer`.
  void run_chunked(const BufferView& buffer, Copy copy,
                   const std::function<void(void* host, size_t count)>& op);

 private:
  struct Staged {
    PinnedPool::Block* block;
    const BufferView* buffer;
    Copy copy;
  };
  PinnedPool::Block* lease(size_t bytes);
  void copy_async(void* dst, const void* src, size_t bytes, CopyKind kind);
  // Queues the copy of `bytes` from pinned `src` to device memory `dst`.
  void copy_to_device(void* dst, const void* src, size_t bytes);
  void record(CudaEvent event);
  void wait(CudaEvent event);
  CudaEvent new_event();

  const CudaRuntime& cuda_;
  PinnedPool& pool_;
  std::string what_;
  int64_t timeout_ms_;
  int device_;
  CudaStream stream_;
  CudaDeviceScope device_scope_;  // the caller's device comes back after the destructor's body
  std::vector<PinnedPool::Block*> leased_;
  std::vector<Staged> staged_;
  std::vector<CudaEvent> events_;
};

// op(host) for `what` on `buffers`: host[i] is buffers[i]'s memory when they are on the host,
// a pinned block standing for it when they are on CUDA (copies[i] says which way its bytes
// cross).
void run_staged(PinnedPool& pool, const std::vector<const BufferView*>& buffers,
                const std::vector<Copy>& copies, const std::string& what, int64_t timeout_ms,
                const std::function<void(const std::vector<void*>& host)>& op);

// op(host, count) for an in-place operation on `buffer`: once on its memory when it is on the
// host; chunk by chunk through pinned blocks when it is on CUDA.
void run_in_place(PinnedPool& pool, const BufferView& buffer, Copy copy, const std::string& what,
                  int64_t timeout_ms, const std::function<void(void* host, size_t count)>& op);

}  // namespace pscore::gpu
