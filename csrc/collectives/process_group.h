// ProcessGroup: the collectives and point-to-point operations of one group of ranks over one
// transport, with torch.distributed's semantics; algorithms are picked by message size.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/exchange.h"
#include "collectives/executor.h"
#include "collectives/op_progress.h"
#include "collectives/yield_gauge.h"
#include "common/dtype.h"
#include "gpu/pinned_pool.h"
#include "transport/transport.h"

namespace pscore {

struct Comm;

// How an allreduce runs (algorithms.h). Buffers of fewer elements than ranks always take
// recursive doubling.
enum class AllreduceAlgorithm {
  kAuto,               // by size and transport (ProcessGroup::allreduce_algorithm)
  kRecursiveDoubling,  // log2(n) steps, each moving the whole buffer
  kRing,               // 2(n-1) steps to the neighbours
  kHalvingDoubling,    // 2 log2(n) steps on powers of two (plus a fold on other sizes)
};

// How an allgather runs, and the allgather half of a large broadcast. Recursive doubling needs
// a power-of-two world of 4 or more ranks; other worlds take the ring whatever is asked.
enum class AllgatherAlgorithm {
  kAuto,               // by size and transport (ProcessGroup::allgather_algorithm)
  kRing,               // n-1 steps to the neighbours
  kRecursiveDoubling,  // log2(n) steps, the same bytes as the ring
};

// How a reduce_scatter runs. Recursive halving needs a power-of-two world of 4 or more ranks;
// other worlds take the ring whatever is asked.
enum class ReduceScatterAlgorithm {
  kAuto,              // by size and transport (ProcessGroup::reduce_scatter_algorithm)
  kRing,              // n-1 steps to the neighbours, the inputs read in place
  kRecursiveHalving,  // log2(n) steps through a copy of the inputs
};

// How a broadcast runs (chosen by size, transport and cores: ProcessGroup::broadcast_algorithm).
enum class BroadcastAlgorithm {
  kBinomial,          // a tree ceil(log2 n) deep: (n-1)x the buffer in all
  kScatterAllgather,  // the root scatters blocks, then an allgather: ~2x the buffer per rank
  kFromRoot,          // every rank reads the root's buffer at once (payloads sent by address)
};

struct GroupOptions {
  int64_t timeout_ms = 30000;
  int spin_us = -1;   // -1: spin only when ranks fit on the cores (20 ms blocking, 50 us async)
  int yield_us = -1;  // -1: when ranks outnumber the cores, poll with sched_yield before sleeping
  size_t small_allreduce_bytes = 64 << 10;  // auto: recursive doubling up to this size
  AllreduceAlgorithm allreduce_algorithm = AllreduceAlgorithm::kAuto;  // else: at every size
  // From this size (and n > 3) broadcasts scatter then allgather; -1: from 512 KB while the ranks
  // fit on the cores, never while they take turns (ProcessGroup::broadcast_algorithm).
  int64_t large_broadcast_bytes = -1;
  AllgatherAlgorithm allgather_algorithm = AllgatherAlgorithm::kAuto;  // else: at every size
  ReduceScatterAlgorithm reduce_scatter_algorithm = ReduceScatterAlgorithm::kAuto;  // likewise
  // Whether the ranks fit on the cores, as the group agreed (1 or 0): auto's algorithms follow
  // it, and every rank must choose alike, also on hosts with other core counts. -1: this host's
  // answer for the group's size (common/cores.h), right where every rank shares the host.
  int ranks_fit_cores = -1;
};

class ProcessGroup {
 public:
  using WorkPtr = std::shared_ptr<TaskWork>;

  ProcessGroup(std::shared_ptr<Transport> transport, GroupOptions options);
  ~ProcessGroup();

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  const char* transport_name() const { return transport_->name(); }
  const GroupOptions& options() const { return options_; }
  // Whether auto's choices take the ranks to fit on the cores (GroupOptions::ranks_fit_cores).
  bool ranks_fit_cores() const { return fits_cores_; }
  // The algorithm an allreduce of `count` elements of `dtype` takes here (never kAuto).
  AllreduceAlgorithm allreduce_algorithm(size_t count, DType dtype) const;
  // The algorithms an allgather or reduce_scatter of `count` elements per rank takes here.
  AllgatherAlgorithm allgather_algorithm(size_t count, DType dtype) const;
  ReduceScatterAlgorithm reduce_scatter_algorithm(size_t count, DType dtype) const;
  BroadcastAlgorithm broadcast_algorithm(size_t nbytes) const;

  // All buffers are `count` elements of `dtype` unless said otherwise; every call blocks until
  // done unless async, in which case the Work reports completion and failure. A blocking
  // collective throws its failure and returns no Work (nullptr) when it ran on the caller's
  // thread (nothing queued before it), a done Work otherwise.
  WorkPtr allreduce(void* buf, size_t count, DType dtype, ReduceOp op, bool async);
  WorkPtr broadcast(void* buf, size_t count, DType dtype, int root, bool async);
  WorkPtr reduce(void* buf, size_t count, DType dtype, ReduceOp op, int root, bool async);
  // outputs[r] receives rank r's input (count elements each).
  WorkPtr allgather(const void* input, size_t count, DType dtype, std::vector<void*> outputs,
                    bool async);
  // inputs[b] is this rank's contribution to block b; output gets the reduced block rank().
  WorkPtr reduce_scatter(std::vector<const void*> inputs, void* output, size_t count, DType dtype,
                         ReduceOp op, bool async);
  WorkPtr gather(const void* input, size_t count, DType dtype, std::vector<void*> outputs, int root,
                 bool async);
  WorkPtr scatter(std::vector<const void*> inputs, void* output, size_t count, DType dtype,
                  int root, bool async);
  WorkPtr all_to_all(std::vector<const void*> inputs, std::vector<size_t> send_counts,
                     std::vector<void*> outputs, std::vector<size_t> recv_counts, DType dtype,
                     bool async);
  WorkPtr barrier(bool async);
  WorkPtr send(const void* buf, size_t count, DType dtype, int dst, uint32_t tag, bool async);
  WorkPtr recv(void* buf, size_t count, DType dtype, int src, uint32_t tag, bool async);
  // Receives the next point-to-point message of whichever peer sends first (torch's recv with
  // src=None); work->source() names the sender once it completes. A peer is chosen only when
  // no receive from it is queued, so receives from a named source keep their order. Timing out
  // with no message consumed leaves the group usable.
  WorkPtr recv_any(void* buf, size_t count, DType dtype, uint32_t tag, bool async);

  // What the collective lane runs now (or ran last); any thread, lock-free.
  OpSnapshot progress() const { return progress_.snapshot(); }

  // The pinned host blocks the group's CUDA buffers are staged through (gpu/staging.h).
  gpu::PinnedPool& staging_pool() { return staging_pool_; }

  // Marks the group broken and tells the peers; later calls fail at once with the reason.
  void abort(const std::string& reason);
  std::string broken_reason();

 private:
  struct P2PLane {
    std::unique_ptr<Executor> executor;
    uint64_t seq = 0;
  };
  // `async`: the operation runs while its caller goes on (it polls for less long).
  OpContext context(OpKind kind, DType dtype, bool async, int lane = kCollectiveLane) const;
  // Runs body(ctx) as the group's next collective. A synchronous call with nothing queued
  // runs it on the caller's thread and returns no Work (its failure propagates): the path of
  // small blocking collectives, with no allocation. Defined (and used) in process_group.cc.
  template <class Body>
  WorkPtr submit(OpKind kind, DType dtype, size_t nbytes, bool async, Body&& body);
  WorkPtr submit_p2p(bool is_send, int peer, DType dtype, uint32_t tag, bool async,
                     std::function<void(const OpContext&)> fn);
  // With p2p_mu_ held: the lane's executor, made on first use.
  Executor& p2p_executor(bool is_send, int peer);
  std::function<void()> p2p_task(bool is_send, int peer, DType dtype, uint32_t tag,
                                 std::function<void(const OpContext&)> fn);
  std::string p2p_what(bool is_send, int peer) const;
  // Queues the receive of the message with `tag` that an otherwise idle peer has begun to
  // send; nullptr when there is none, with `watch` set to the peers worth sleeping on.
  WorkPtr claim_arrived(void* buf, size_t count, DType dtype, uint32_t tag, int& peer,
                        std::vector<WaitItem>& watch);
  void run_recv_any(TaskWork& outer, void* buf, size_t count, DType dtype, uint32_t tag);
  void throw_if_broken(const std::string& what);
  std::function<void(const OpContext&)> recv_body(int src, void* buf, size_t count, DType dtype);
  template <class Body>
  void run_guarded(const OpContext& ctx, const Body& body);
  void check_rank(int r, const char* what) const;
  char* scratch(size_t nbytes);
  // 8, 16, 32... ranks that outnumber the cores: the ring's many step ends cost most.
  bool many_power_of_two_ranks_take_turns() const {
    return power_of_two_ && size() >= 8 && !fits_cores_;
  }
  // An auto choice between the ring and the power-of-two algorithm `fewer` (algorithm_choice.cc).
  template <class Algorithm>
  Algorithm fewer_steps_or_ring(size_t total_bytes, size_t small_bytes, size_t turns_bytes,
                                Algorithm asked, Algorithm fewer) const;
  // The broadcast_algorithm's steps for a broadcast of count elements of dtype.
  void run_broadcast(Comm& c, void* buf, size_t count, DType dtype, int root);
  void allgather_in_one_buffer(Comm& c, const void* input, const std::vector<void*>& outputs,
                               size_t count);

  std::shared_ptr<Transport> transport_;
  GroupOptions options_;
  int spin_us_;
  size_t large_broadcast_bytes_;  // options_.large_broadcast_bytes resolved
  // Ranks fit on the cores: a blocking call's sends help move (OpContext); else auto prefers
  // fewer steps for large all_gathers and the tree for large broadcasts.
  bool fits_cores_;
  bool power_of_two_;  // the world is 4, 8, 16... ranks: the log2(n)-step algorithms apply
  // The transport's steps are costly and power_of_two_: auto may halve and double.
  bool fewer_steps_pay_;
  int yield_us_;
  mutable YieldGauge yield_gauge_;  // whether yields cost a time slice: then sleep at once
  std::mutex submit_mu_;            // keeps sequence numbers in queue order across caller threads
  uint64_t seq_ = 0;                // collective sequence number, advanced at submission
  OpProgress progress_;             // the collective lane's running op
  std::vector<char> scratch_;       // used only by the collective executor's running op
  std::mutex broken_mu_;
  std::string broken_;
  std::atomic<bool> is_broken_{false};  // broken_ is set: read without the lock
  std::mutex p2p_mu_;
  std::vector<P2PLane> send_lanes_;
  std::vector<P2PLane> recv_lanes_;
  gpu::PinnedPool staging_pool_;          // after the executors' drain: no copy reads it then
  std::unique_ptr<Executor> any_source_;  // runs receives from any source, one at a time
  int next_any_ = 0;                      // the peer claim_arrived looks at first (fairness)
  std::unique_ptr<Executor> executor_;    // declared last: destroyed (drained) first
};

}  // namespace pscore
