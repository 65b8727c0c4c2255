// NcclWork: the Work of one NCCL operation enqueued on a CUDA stream. It completes when the
// event recorded after it on that stream does, or fails when the communicator's watchdog
// (gpu/nccl_communicator.h) aborts the communicator. Follows torch's NCCL Work: wait_stream()
// orders a stream after it without blocking the host; wait() blocks the host.
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/work.h"
#include "gpu/cuda_runtime.h"

namespace pscore::gpu {

class NcclWork : public Work {
 public:
  NcclWork(std::string what, int device) : Work(std::move(what)), device_(device) {}
  ~NcclWork() override;

  // Polls the event (every 1 ms or so) until it completes, the operation fails or timeout_ms
  // passes (< 0: no limit); rethrows the failure. Thread-safe.
  bool wait(int64_t timeout_ms = -1) override;
  bool is_completed() override;
  std::exception_ptr exception() override;
  // Makes `stream` wait for the operation on the GPU (cudaStreamWaitEvent), without blocking
  // the host; rethrows the failure when it has failed already.
  void wait_stream(uintptr_t stream);

  // For the communicator: the event recorded after the operation (owned from here on).
  void set_event(CudaEvent event);
  // Completion as the GPU reports it now: true once done (or failed).
  bool poll();
  // Marks it failed (once) with `error`; later polls and waits rethrow it.
  void fail(std::exception_ptr error);
  // How long since it was enqueued.
  int64_t age_ms() const;
  bool has_event();

 private:
  std::mutex mu_;
  const int device_;
  const Clock::time_point start_ = Clock::now();
  CudaEvent event_ = nullptr;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace pscore::gpu
