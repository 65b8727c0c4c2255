// One NCCL communicator of a process group: pscore's collectives and send/recv on CUDA buffers,
// each enqueued on the first buffer's stream (torch's current stream at the call) on its device,
// returning once enqueued. A watchdog thread polls every outstanding operation's event and
// ncclCommGetAsyncError; past the timeout, or on an asynchronous NCCL error, it aborts the
// communicator (ncclCommAbort, which also ends the kernels still spinning), fails the operations
// still outstanding and makes every later call throw the same cause.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer_view.h"
#include "common/dtype.h"
#include "gpu/nccl.h"
#include "gpu/nccl_work.h"

namespace pscore::gpu {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;                // the CUDA device every buffer must be on
  int64_t timeout_ms = 1800000;  // an operation not complete on the GPU after this aborts
  std::string group = "world";   // for messages
  std::vector<int> ranks;        // for messages: the members' global ranks, in order
};

class NcclCommunicator {
 public:
  using WorkPtr = std::shared_ptr<NcclWork>;
  using Views = std::vector<BufferView>;

  // A new unique id (ncclGetUniqueId), as the bytes rank 0 hands the others through the store.
  static std::string unique_id();

  // Joins the communicator (ncclCommInitRank: blocks until all `size` ranks have joined with
  // `unique_id`). pscore::Error with NCCL's message when it fails.
  NcclCommunicator(const NcclOptions& options, const std::string& unique_id);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // The operations of collectives/process_group.h, on CUDA buffers of the communicator's device.
  // Each returns once enqueued; throws at once when the communicator was aborted.
  WorkPtr allreduce(const BufferView& b, ReduceOp op);
  WorkPtr broadcast(const BufferView& b, int root);
  WorkPtr reduce(const BufferView& b, ReduceOp op, int root);
  WorkPtr allgather(const BufferView& in, const Views& outs);
  WorkPtr reduce_scatter(const Views& ins, const BufferView& out, ReduceOp op);
  WorkPtr gather(const BufferView& in, const Views& outs, int root);
  WorkPtr scatter(const Views& ins, const BufferView& out, int root);
  WorkPtr all_to_all(const Views& ins, const Views& outs);
  WorkPtr send(const BufferView& b, int peer);
  WorkPtr recv(const BufferView& b, int peer);

  // Aborts the communicator (as the watchdog does) with `reason`, as a pscore::Error.
  void abort(const std::string& reason);
  // Waits (up to the timeout) for the outstanding operations, then destroys the communicator;
  // aborts it instead when they do not finish. Later calls throw. Idempotent.
  void destroy();
  // Why it was aborted; "" while healthy.
  std::string broken_reason();
  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  int device() const { return options_.device; }

 private:
  using Body = std::function<void(const Nccl&, CudaStream)>;
  // Checks the buffers, then runs body on the first one's stream with the device current and
  // records the operation's event after it.
  WorkPtr enqueue(const char* kind, const Views& buffers, const Body& body);
  std::string describe(const char* kind, uint64_t seq) const;
  // How messages name this rank: its global rank when `ranks` lists every member.
  int named_rank() const;
  void check_peer(int peer, const char* role, const std::string& what) const;
  void check_device(const BufferView& b, size_t index, const std::string& what) const;
  void throw_if_broken(const std::string& what);
  // Records `cause` as the communicator's failure (a TimeoutError when timed_out), fails every
  // outstanding operation with it (each named; `culprit` with the cause alone) and aborts the
  // communicator (once).
  void fail(const std::string& cause, bool timed_out, const NcclWork* culprit);
  void watchdog();
  // One watchdog round: the async error, each operation's event, the oldest one's age.
  void check_outstanding();

  const NcclOptions options_;
  NcclComm comm_ = nullptr;
  std::mutex enqueue_mu_;  // one enqueue at a time: a communicator is not thread-safe
  std::mutex release_mu_;  // held around ncclCommGetAsyncError, abort and destroy of comm_
  std::mutex mu_;          // guards the fields below
  std::condition_variable wake_;
  std::deque<WorkPtr> outstanding_;
  uint64_t seq_ = 0;
  std::string broken_;  // why it was aborted; "" while healthy
  bool broken_by_timeout_ = false;
  bool comm_released_ = false;  // aborted or destroyed
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace pscore::gpu
