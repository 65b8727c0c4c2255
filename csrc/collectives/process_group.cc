#include "collectives/process_group.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "collectives/algorithms.h"
#include "collectives/message.h"
#include "common/clock.h"
#include "common/cores.h"
#include "common/error.h"
#include "common/reduce.h"

namespace pscore {
namespace {
// A rank blocked in a call polls its peers this long before it sleeps, when the ranks fit on the
// cores: under load a peer is often preempted for a few milliseconds, and a rank that sleeps then
// gives its core away and waits out the scheduler's wake-up, so both fall behind (p50 of a 4 KB
// allreduce 89 us with 50 us, 4 us with this, against a busy process on this 2-core machine).
constexpr int kDefaultSpinUs = 20000;
// Work run on an executor thread while its caller goes on computing polls only this long: its
// spin would take a core from the caller.
constexpr int kBackgroundSpinUs = 50;
constexpr int kDefaultYieldUs = 100;
// Broadcasts scatter then allgather from this size while the ranks fit on the cores: each rank
// then moves ~2x the buffer instead of the tree's log2(n)x. While they take turns on the cores the
// total counts, and the tree moves less: (n-1)x against ~(n-1+(n-1)/n)x. 4 ranks on 2 cores, a
// loop of broadcasts, tree time / scatter-allgather's: shared memory 512 KB 0.88, 1 MB 0.56,
// 4 MB 0.59-0.64, 8 MB 0.63, 16 MB 0.68-1.08, 32 MB 0.95, 64 MB 0.92-1.13; TCP 1 MB 0.71,
// 4 MB 0.94, 16 MB 0.77.
constexpr size_t kDefaultLargeBroadcastBytes = 512 << 10;
constexpr int kAnySourceSliceMs = 50;              // a receive from any source sleeps this long
constexpr int64_t kAnySourcePeerCheckUs = 100000;  // and looks for dead peers this often
}  // namespace

ProcessGroup::ProcessGroup(std::shared_ptr<Transport> transport, GroupOptions options)
    : transport_(std::move(transport)), options_(options) {
  fits_cores_ = options_.ranks_fit_cores >= 0 ? options_.ranks_fit_cores == 1
                                              : pscore::ranks_fit_cores(size());
  spin_us_ = options_.spin_us >= 0 ? options_.spin_us : (fits_cores_ ? kDefaultSpinUs : 0);
  yield_us_ = options_.yield_us >= 0 ? options_.yield_us : (fits_cores_ ? 0 : kDefaultYieldUs);
  large_broadcast_bytes_ = options_.large_broadcast_bytes >= 0
                               ? static_cast<size_t>(options_.large_broadcast_bytes)
                               : (fits_cores_ ? kDefaultLargeBroadcastBytes : SIZE_MAX);
  const int n = size();
  power_of_two_ = n >= 4 && (n & (n - 1)) == 0;
  fewer_steps_pay_ = transport_->costly_steps() && power_of_two_;
  send_lanes_.resize(size());
  recv_lanes_.resize(size());
  executor_ = std::make_unique<Executor>();
}

ProcessGroup::~ProcessGroup() {
  executor_.reset();    // drain queued collectives before the transport goes
  any_source_.reset();  // its receives wait on the lanes' executors
  for (auto* lanes : {&send_lanes_, &recv_lanes_})
    for (auto& l : *lanes) l.executor.reset();
}

OpContext ProcessGroup::context(OpKind kind, DType dtype, bool async, int lane) const {
  OpContext ctx;
  ctx.kind = kind;
  ctx.dtype = dtype;
  ctx.lane = lane;
  ctx.timeout_ms = options_.timeout_ms;
  ctx.spin_us = async ? std::min(spin_us_, kBackgroundSpinUs) : spin_us_;
  // A default yield window is closed while yields cost a time slice (YieldGauge).
  const bool adapt = options_.yield_us < 0 && yield_us_ > 0;
  ctx.yield_us = adapt && !yield_gauge_.should_yield() ? 0 : yield_us_;
  if (adapt) ctx.yield_gauge = &yield_gauge_;
  ctx.help_moves = fits_cores_ && !async;
  return ctx;
}

void ProcessGroup::check_rank(int r, const char* what) const {
  if (r < 0 || r >= size())
    throw std::invalid_argument(std::string(what) + " rank " + std::to_string(r) +
                                " is out of range for a group of " + std::to_string(size()));
}

char* ProcessGroup::scratch(size_t nbytes) {
  if (scratch_.size() < nbytes) scratch_.resize(nbytes);
  return scratch_.data();
}

void ProcessGroup::throw_if_broken(const std::string& what) {
  std::lock_guard<std::mutex> lock(broken_mu_);
  if (!broken_.empty()) throw NetworkError(what + ": the group is broken: " + broken_);
}

// Runs one operation; a network failure or timeout breaks the group (streams are out of step)
// and tells the peers, so they fail fast instead of waiting out their own timeouts.
template <class Body>
void ProcessGroup::run_guarded(const OpContext& base, const Body& body) {
  if (is_broken_.load(std::memory_order_acquire))
    throw_if_broken(std::string(op_kind_name(base.kind)) + " #" + std::to_string(base.seq));
  OpContext ctx = base;
  LazyDeadline deadline(options_.timeout_ms);
  ctx.deadline = &deadline;
  struct EndOnExit {  // the lane is idle again however fn leaves
    OpProgress* progress;
    ~EndOnExit() {
      if (progress) progress->end();
    }
  } end_on_exit{ctx.lane == kCollectiveLane ? &progress_ : nullptr};
  if (end_on_exit.progress) {
    progress_.begin(ctx);
    ctx.waiting_on = progress_.waiting_on();
  }
  try {
    body(ctx);
  } catch (const Error& e) {
    abort(e.what());
    throw;
  }
}

template <class Body>
ProcessGroup::WorkPtr ProcessGroup::submit(OpKind kind, DType dtype, size_t nbytes, bool async,
                                           Body&& body) {
  std::lock_guard<std::mutex> lock(submit_mu_);
  OpContext ctx = context(kind, dtype, async);
  ctx.seq = seq_++;
  ctx.nbytes = nbytes;
  if (!async && executor_->run_here_if_idle([&] { run_guarded(ctx, body); })) return nullptr;
  auto work = std::make_shared<TaskWork>(rank(), kind, ctx.seq);
  return executor_->submit(
      std::move(work), [this, ctx, body = std::forward<Body>(body)] { run_guarded(ctx, body); },
      async);
}

Executor& ProcessGroup::p2p_executor(bool is_send, int peer) {
  P2PLane& lane = (is_send ? send_lanes_ : recv_lanes_)[peer];
  if (!lane.executor) lane.executor = std::make_unique<Executor>();
  return *lane.executor;
}

// The sequence number is taken when the task starts: a lane's executor runs its tasks one at a
// time, so the numbers follow the order the messages travel in, whichever threads submitted
// them and in whatever order their submissions reached the executor.
std::function<void()> ProcessGroup::p2p_task(bool is_send, int peer, DType dtype, uint32_t tag,
                                             std::function<void(const OpContext&)> fn) {
  return [this, is_send, peer, dtype, tag, fn = std::move(fn)] {
    OpContext ctx = context(OpKind::kSend, dtype, true, kP2PLane);
    ctx.tag = tag;
    {
      std::lock_guard<std::mutex> lock(p2p_mu_);
      ctx.seq = (is_send ? send_lanes_ : recv_lanes_)[peer].seq++;
    }
    run_guarded(ctx, fn);
  };
}

std::string ProcessGroup::p2p_what(bool is_send, int peer) const {
  return "rank " + std::to_string(rank()) + (is_send ? ": send to rank " : ": recv from rank ") +
         std::to_string(peer);
}

ProcessGroup::WorkPtr ProcessGroup::submit_p2p(bool is_send, int peer, DType dtype, uint32_t tag,
                                               bool async,
                                               std::function<void(const OpContext&)> fn) {
  Executor* ex;
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    ex = &p2p_executor(is_send, peer);
  }
  WorkPtr work = ex->submit(p2p_what(is_send, peer),
                            p2p_task(is_send, peer, dtype, tag, std::move(fn)), async);
  work->set_source(peer);
  return work;
}

ProcessGroup::WorkPtr ProcessGroup::allreduce(void* buf, size_t count, DType dtype, ReduceOp op,
                                              bool async) {
  check_reduce_op(op, dtype);
  return submit(OpKind::kAllreduce, dtype, count * dtype_size(dtype), async,
                [=](const OpContext& ctx) {
                  const size_t nbytes = count * dtype_size(dtype);
                  if (size() > 1 && count > 0) {
                    Comm c{*transport_, ctx};
                    switch (allreduce_algorithm(count, dtype)) {
                      case AllreduceAlgorithm::kHalvingDoubling:
                        allreduce_halving_doubling(c, buf, count, op);
                        break;
                      case AllreduceAlgorithm::kRing:
                        allreduce_ring(c, buf, count, op);
                        break;
                      default:
                        allreduce_recursive_doubling(c, buf, count, op, scratch(nbytes));
                    }
                  }
                  if (op == ReduceOp::kAvg) divide_by(buf, count, dtype, size());
                });
}

ProcessGroup::WorkPtr ProcessGroup::broadcast(void* buf, size_t count, DType dtype, int root,
                                              bool async) {
  check_rank(root, "broadcast root");
  return submit(OpKind::kBroadcast, dtype, count * dtype_size(dtype), async,
                [=](const OpContext& ctx) {
                  if (size() == 1) return;
                  Comm c{*transport_, ctx};
                  run_broadcast(c, buf, count, dtype, root);
                });
}

void ProcessGroup::run_broadcast(Comm& c, void* buf, size_t count, DType dtype, int root) {
  const size_t nbytes = count * dtype_size(dtype);
  switch (broadcast_algorithm(nbytes)) {
    case BroadcastAlgorithm::kScatterAllgather:
      broadcast_scatter_allgather(
          c, buf, count, root,
          allgather_algorithm(count / size(), dtype) == AllgatherAlgorithm::kRecursiveDoubling);
      return;
    case BroadcastAlgorithm::kFromRoot:
      broadcast_from_root(c, buf, nbytes, root);
      return;
    case BroadcastAlgorithm::kBinomial:
      broadcast_binomial(c, buf, nbytes, root);
  }
}

ProcessGroup::WorkPtr ProcessGroup::reduce(void* buf, size_t count, DType dtype, ReduceOp op,
                                           int root, bool async) {
  check_reduce_op(op, dtype);
  check_rank(root, "reduce root");
  return submit(OpKind::kReduce, dtype, count * dtype_size(dtype), async,
                [=](const OpContext& ctx) {
                  if (size() > 1) {
                    Comm c{*transport_, ctx};
                    reduce_binomial(c, buf, count, op, root, scratch(count * dtype_size(dtype)));
                  }
                  if (op == ReduceOp::kAvg && rank() == root) divide_by(buf, count, dtype, size());
                });
}

ProcessGroup::WorkPtr ProcessGroup::allgather(const void* input, size_t count, DType dtype,
                                              std::vector<void*> outputs, bool async) {
  if (static_cast<int>(outputs.size()) != size())
    throw std::invalid_argument("allgather needs one output per rank");
  const size_t nbytes = count * dtype_size(dtype);
  return submit(OpKind::kAllgather, dtype, nbytes, async,
                [=, outs = std::move(outputs),
                 bytes = std::vector<size_t>(size(), nbytes)](const OpContext& ctx) {
                  if (size() == 1) {
                    if (nbytes && outs[0] != input) std::memmove(outs[0], input, nbytes);
                    return;
                  }
                  Comm c{*transport_, ctx};
                  if (allgather_algorithm(count, dtype) == AllgatherAlgorithm::kRecursiveDoubling)
                    allgather_in_one_buffer(c, input, outs, count);
                  else
                    allgather_ring(c, input, outs, bytes);
                });
}

// Recursive doubling on the outputs where they are one buffer in rank order, else on scratch.
void ProcessGroup::allgather_in_one_buffer(Comm& c, const void* input,
                                           const std::vector<void*>& outputs, size_t count) {
  const size_t nbytes = count * dtype_size(c.ctx.dtype);
  char* first = static_cast<char*>(outputs[0]);
  bool in_order = true;
  for (int r = 1; r < size(); ++r) in_order &= outputs[r] == first + r * nbytes;
  char* buf = in_order ? first : scratch(nbytes * size());
  char* own = buf + rank() * nbytes;
  if (nbytes && own != input) std::memmove(own, input, nbytes);
  allgather_recursive_doubling(c, buf, count * size(), VirtualRanks{size(), rank(), 0, size()});
  if (in_order) return;
  for (int r = 0; r < size(); ++r)
    if (nbytes) std::memcpy(outputs[r], buf + r * nbytes, nbytes);
}

ProcessGroup::WorkPtr ProcessGroup::reduce_scatter(std::vector<const void*> inputs, void* output,
                                                   size_t count, DType dtype, ReduceOp op,
                                                   bool async) {
  check_reduce_op(op, dtype);
  if (static_cast<int>(inputs.size()) != size())
    throw std::invalid_argument("reduce_scatter needs one input block per rank");
  const size_t nbytes = count * dtype_size(dtype);
  return submit(
      OpKind::kReduceScatter, dtype, nbytes, async,
      [=, ins = std::move(inputs),
       counts = std::vector<size_t>(size(), count)](const OpContext& ctx) {
        if (size() == 1) {
          if (nbytes && output != ins[0]) std::memmove(output, ins[0], nbytes);
        } else {
          Comm c{*transport_, ctx};
          if (reduce_scatter_algorithm(count, dtype) == ReduceScatterAlgorithm::kRecursiveHalving)
            reduce_scatter_recursive_halving(c, ins, count, output, op, scratch(nbytes * size()));
          else
            reduce_scatter_ring(c, ins, counts, output, op, scratch(nbytes * size()));
        }
        if (op == ReduceOp::kAvg) divide_by(output, count, dtype, size());
      });
}

ProcessGroup::WorkPtr ProcessGroup::gather(const void* input, size_t count, DType dtype,
                                           std::vector<void*> outputs, int root, bool async) {
  check_rank(root, "gather root");
  if (rank() == root && static_cast<int>(outputs.size()) != size())
    throw std::invalid_argument("gather needs one output per rank on the root");
  return submit(OpKind::kGather, dtype, count * dtype_size(dtype), async,
                [=, outs = std::move(outputs)](const OpContext& ctx) {
                  Comm c{*transport_, ctx};
                  gather_direct(c, input, count * dtype_size(dtype), outs, root);
                });
}

ProcessGroup::WorkPtr ProcessGroup::scatter(std::vector<const void*> inputs, void* output,
                                            size_t count, DType dtype, int root, bool async) {
  check_rank(root, "scatter root");
  if (rank() == root && static_cast<int>(inputs.size()) != size())
    throw std::invalid_argument("scatter needs one input per rank on the root");
  return submit(OpKind::kScatter, dtype, count * dtype_size(dtype), async,
                [=, ins = std::move(inputs)](const OpContext& ctx) {
                  Comm c{*transport_, ctx};
                  scatter_direct(c, ins, output, count * dtype_size(dtype), root);
                });
}

ProcessGroup::WorkPtr ProcessGroup::all_to_all(std::vector<const void*> inputs,
                                               std::vector<size_t> send_counts,
                                               std::vector<void*> outputs,
                                               std::vector<size_t> recv_counts, DType dtype,
                                               bool async) {
  const size_t n = static_cast<size_t>(size());
  if (inputs.size() != n || outputs.size() != n || send_counts.size() != n ||
      recv_counts.size() != n)
    throw std::invalid_argument("all_to_all needs one input and one output per rank");
  if (send_counts[rank()] != recv_counts[rank()])
    throw std::invalid_argument(
        "all_to_all: this rank sends " + std::to_string(send_counts[rank()]) +
        " elements to itself but expects " + std::to_string(recv_counts[rank()]));
  const size_t esize = dtype_size(dtype);
  size_t send_total = 0;
  for (size_t& c : send_counts) {
    send_total += c;
    c *= esize;
  }
  for (size_t& c : recv_counts) c *= esize;
  return submit(
      OpKind::kAllToAll, dtype, send_total * esize, async,
      [this, ins = std::move(inputs), send_bytes = std::move(send_counts),
       outs = std::move(outputs), recv_bytes = std::move(recv_counts)](const OpContext& ctx) {
        Comm c{*transport_, ctx};
        all_to_all_pairwise(c, ins, send_bytes, outs, recv_bytes);
      });
}

ProcessGroup::WorkPtr ProcessGroup::barrier(bool async) {
  return submit(OpKind::kBarrier, DType::kUInt8, 0, async, [=](const OpContext& ctx) {
    Comm c{*transport_, ctx};
    barrier_dissemination(c);
  });
}

ProcessGroup::WorkPtr ProcessGroup::send(const void* buf, size_t count, DType dtype, int dst,
                                         uint32_t tag, bool async) {
  check_rank(dst, "send destination");
  if (dst == rank()) throw std::invalid_argument("send: a rank cannot send to itself");
  return submit_p2p(true, dst, dtype, tag, async, [=](const OpContext& ctx) {
    Exchange x(*transport_, ctx);
    x.send(dst, buf, count * dtype_size(dtype));
    x.run();
  });
}

ProcessGroup::WorkPtr ProcessGroup::recv(void* buf, size_t count, DType dtype, int src,
                                         uint32_t tag, bool async) {
  check_rank(src, "recv source");
  if (src == rank()) throw std::invalid_argument("recv: a rank cannot receive from itself");
  return submit_p2p(false, src, dtype, tag, async, recv_body(src, buf, count, dtype));
}

std::function<void(const OpContext&)> ProcessGroup::recv_body(int src, void* buf, size_t count,
                                                              DType dtype) {
  return [=](const OpContext& ctx) {
    Exchange x(*transport_, ctx);
    x.recv(src, buf, count * dtype_size(dtype));
    x.run();
  };
}

ProcessGroup::WorkPtr ProcessGroup::recv_any(void* buf, size_t count, DType dtype, uint32_t tag,
                                             bool async) {
  if (size() < 2) throw std::invalid_argument("recv: a group of one rank has no peer to hear from");
  Executor* ex;
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    if (!any_source_) any_source_ = std::make_unique<Executor>();
    ex = any_source_.get();
  }
  auto work =
      std::make_shared<TaskWork>("rank " + std::to_string(rank()) + ": recv from any source");
  TaskWork* outer = work.get();  // the task holds the Work, so it outlives the task
  return ex->submit(work, [=] { run_recv_any(*outer, buf, count, dtype, tag); }, async);
}

ProcessGroup::WorkPtr ProcessGroup::claim_arrived(void* buf, size_t count, DType dtype,
                                                  uint32_t tag, int& peer,
                                                  std::vector<WaitItem>& watch) {
  watch.clear();
  std::lock_guard<std::mutex> lock(p2p_mu_);
  for (int k = 0; k < size(); ++k) {
    const int p = (next_any_ + k) % size();
    if (p == rank()) continue;
    Executor* lane = recv_lanes_[p].executor.get();
    if (lane && !lane->idle()) continue;  // its next message belongs to a queued receive
    MessageHeader h;
    if (transport_->channel(p, kP2PLane).peek(&h, sizeof h) < sizeof h) {
      watch.push_back(WaitItem{p, kP2PLane, false});
      continue;
    }
    if (h.tag != tag) continue;  // the next message is for a receive with another tag
    next_any_ = (p + 1) % size();
    peer = p;
    return p2p_executor(false, p).submit(
        p2p_what(false, p), p2p_task(false, p, dtype, tag, recv_body(p, buf, count, dtype)), true);
  }
  return nullptr;
}

// Looks at every peer's next point-to-point message and receives the first with the wanted
// tag through that peer's own lane; sleeps on the peers whose next header has not arrived
// (the others are looked at again after each slice).
void ProcessGroup::run_recv_any(TaskWork& outer, void* buf, size_t count, DType dtype,
                                uint32_t tag) {
  throw_if_broken("recv from any source");
  const Deadline deadline(options_.timeout_ms);
  std::vector<WaitItem> watch;
  int64_t last_check = now_us();
  for (;;) {
    int peer = -1;
    WorkPtr inner;
    {
      SleepTurn turn(*transport_);  // first, so a message that arrives after the look wakes it
      inner = claim_arrived(buf, count, dtype, tag, peer, watch);
      if (!inner) {
        turn.wait(watch, deadline.remaining_ms_at_most(kAnySourceSliceMs));
      }
    }
    if (inner) {
      outer.set_source(peer);
      inner->wait();
      return;
    }
    if (now_us() - last_check >= kAnySourcePeerCheckUs) {
      last_check = now_us();
      for (int p = 0; p < size(); ++p)
        if (p != rank()) transport_->check_peer(p);
    }
    if (deadline.expired()) {
      throw TimeoutError("rank " + std::to_string(rank()) + ": recv from any source (tag " +
                         std::to_string(tag) + ") timed out after " +
                         std::to_string(options_.timeout_ms) + " ms: no peer sent a message");
    }
  }
}

void ProcessGroup::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(broken_mu_);
    if (!broken_.empty()) return;
    broken_ = reason;
    is_broken_.store(true, std::memory_order_release);
  }
  transport_->abort("rank " + std::to_string(rank()) + " failed: " + reason);
}

std::string ProcessGroup::broken_reason() {
  std::lock_guard<std::mutex> lock(broken_mu_);
  return broken_;
}

}  // namespace pscore
