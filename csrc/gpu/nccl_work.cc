#include "gpu/nccl_work.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/error.h"

namespace pscore::gpu {

NcclWork::~NcclWork() {
  if (event_) cuda_runtime().cudaEventDestroy(event_);  // safe while still pending
}

void NcclWork::set_event(CudaEvent event) {
  std::lock_guard<std::mutex> lock(mu_);
  event_ = event;
}

bool NcclWork::has_event() {
  std::lock_guard<std::mutex> lock(mu_);
  return event_ != nullptr;
}

int64_t NcclWork::age_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count();
}

bool NcclWork::poll() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ || !event_) return done_;
  const auto& cuda = cuda_runtime();
  const CudaStatus status = cuda.cudaEventQuery(event_);
  if (status == kCudaNotReady) return false;
  done_ = true;
  if (status != kCudaSuccess) {
    try {
      cuda.check(status, what() + ": cudaEventQuery on cuda:" + std::to_string(device_));
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  return true;
}

void NcclWork::fail(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  done_ = true;
  error_ = std::move(error);
}

bool NcclWork::wait(int64_t timeout_ms) {
  const Deadline deadline(timeout_ms);
  int sleep_us = 50;
  while (!poll()) {
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, 1000);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  return true;
}

bool NcclWork::is_completed() { return poll(); }

std::exception_ptr NcclWork::exception() {
  poll();
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void NcclWork::wait_stream(uintptr_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  if (done_ || !event_) return;
  const auto& cuda = cuda_runtime();
  cuda.check(cuda.cudaStreamWaitEvent(reinterpret_cast<CudaStream>(stream), event_, 0),
             what() + ": cudaStreamWaitEvent");
}

}  // namespace pscore::gpu
