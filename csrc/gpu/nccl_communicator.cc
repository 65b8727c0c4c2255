#include "gpu/nccl_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <unordered_set>

#include "common/error.h"

namespace pscore::gpu {

namespace {

// Runs calls between ncclGroupStart and ncclGroupEnd, ending the group also when one throws.
void grouped(const Nccl& nccl, const std::string& what, const std::function<void()>& calls) {
  nccl.check(nccl.ncclGroupStart(), what + ": ncclGroupStart");
  try {
    calls();
  } catch (...) {
    nccl.ncclGroupEnd();
    throw;
  }
  nccl.check(nccl.ncclGroupEnd(), what + ": ncclGroupEnd");
}

// A device-to-device copy on `stream`: a rank's own part of gather, scatter and all_to_all.
void copy_on_stream(const BufferView& to, const BufferView& from, CudaStream stream,
                    const std::string& what) {
  if (!from.nbytes) return;
  const auto& cuda = cuda_runtime();
  cuda.check(
      cuda.cudaMemcpyAsync(to.data, from.data, from.nbytes, CopyKind::kDeviceToDevice, stream),
      what + ": cudaMemcpyAsync");
}

// Whether views lie back to back in memory, in order: one flat buffer NCCL can take whole.
bool back_to_back(const NcclCommunicator::Views& views) {
  for (size_t i = 1; i < views.size(); ++i) {
    const auto* prev = static_cast<const char*>(views[i - 1].data);
    if (views[i].data != prev + views[i - 1].nbytes) return false;
  }
  return true;
}

void same_kind(const NcclCommunicator::Views& views, const BufferView& ref,
               const std::string& what) {
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i].dtype != ref.dtype || views[i].numel != ref.numel) {
      throw std::invalid_argument(what + ": buffer " + std::to_string(i) + " has " +
                                  std::to_string(views[i].numel) + " " +
                                  dtype_name(views[i].dtype) + ", expected " +
                                  std::to_string(ref.numel) + " " + dtype_name(ref.dtype));
    }
  }
}

void count_is(const NcclCommunicator::Views& views, int size, const std::string& what) {
  if (static_cast<int>(views.size()) != size) {
    throw std::invalid_argument(what + ": " + std::to_string(views.size()) +
                                " buffers for a group of " + std::to_string(size) + " ranks");
  }
}

// A pscore::TimeoutError (when timed_out) or pscore::Error carrying `message`.
std::exception_ptr error_of(const std::string& message, bool timed_out) {
  if (timed_out) return std::make_exception_ptr(TimeoutError(message));
  return std::make_exception_ptr(Error(message));
}

NcclCommunicator::Views with(NcclCommunicator::Views views, const BufferView& b) {
  views.insert(views.begin(), b);
  return views;
}

}  // namespace

std::string NcclCommunicator::unique_id() {
  const auto& nccl = gpu::nccl();
  NcclUniqueId id;
  nccl.check(nccl.ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::string(id.internal, sizeof(id.internal));
}

NcclCommunicator::NcclCommunicator(const NcclOptions& options, const std::string& unique_id)
    : options_(options) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    throw std::invalid_argument("NCCL unique id has " + std::to_string(unique_id.size()) +
                                " bytes, expected " + std::to_string(kNcclUniqueIdBytes));
  }
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw std::invalid_argument("NCCL communicator: rank " + std::to_string(options.rank) +
                                " is out of range for size " + std::to_string(options.size));
  }
  NcclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), kNcclUniqueIdBytes);
  const auto& nccl = gpu::nccl();
  {
    const std::string what = "rank " + std::to_string(named_rank()) + ": ncclCommInitRank (group " +
                             options.group + ", " + std::to_string(options.size) +
                             " ranks, cuda:" + std::to_string(options.device) + ")";
    CudaDeviceScope scope(cuda_runtime(), options.device, what);
    nccl.check(nccl.ncclCommInitRank(&comm_, options.size, id, options.rank), what);
  }
  watchdog_ = std::thread([this] { watchdog(); });
}

NcclCommunicator::~NcclCommunicator() { destroy(); }

int NcclCommunicator::named_rank() const {
  const auto& ranks = options_.ranks;
  return static_cast<int>(ranks.size()) == options_.size ? ranks[options_.rank] : options_.rank;
}

std::string NcclCommunicator::describe(const char* kind, uint64_t seq) const {
  std::string ranks;
  for (int r : options_.ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return "rank " + std::to_string(named_rank()) + ": nccl " + kind + " #" + std::to_string(seq) +
         " (group " + options_.group + ", ranks [" + ranks + "])";
}

void NcclCommunicator::throw_if_broken(const std::string& what) {
  if (broken_.empty()) return;
  std::rethrow_exception(
      error_of(what + ": the NCCL communicator was aborted: " + broken_, broken_by_timeout_));
}

void NcclCommunicator::check_device(const BufferView& b, size_t index,
                                    const std::string& what) const {
  if (b.device == DeviceType::kCuda && b.device_index == options_.device) return;
  throw std::invalid_argument(
      what + ": buffer " + std::to_string(index) + " is on " + device_string(b) +
      "; the group's NCCL communicator takes cuda:" + std::to_string(options_.device) +
      " buffers only (every tensor of a call on that device)");
}

void NcclCommunicator::check_peer(int peer, const char* role, const std::string& what) const {
  if (peer < 0 || peer >= options_.size) {
    throw std::invalid_argument(what + ": " + role + " " + std::to_string(peer) +
                                " is out of range for a group of " + std::to_string(options_.size));
  }
}

NcclCommunicator::WorkPtr NcclCommunicator::enqueue(const char* kind, const Views& buffers,
                                                    const Body& body) {
  std::lock_guard<std::mutex> one_at_a_time(enqueue_mu_);
  WorkPtr work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string what = describe(kind, ++seq_);
    throw_if_broken(what);
    if (comm_released_) throw Error(what + ": the NCCL communicator was destroyed");
    for (size_t i = 0; i < buffers.size(); ++i) check_device(buffers[i], i, what);
    work = std::make_shared<NcclWork>(what, options_.device);
    outstanding_.push_back(work);  // watched from here: an enqueue that blocks times out too
  }
  const auto& cuda = cuda_runtime();
  auto stream = reinterpret_cast<CudaStream>(buffers.empty() ? 0 : buffers.front().stream);
  try {
    CudaDeviceScope scope(cuda, options_.device, "");  // the catch below names the operation
    body(nccl(), stream);
    CudaEvent event = nullptr;
    cuda.check(cuda.cudaEventCreateWithFlags(&event, kEventDisableTiming), "cudaEventCreate");
    work->set_event(event);
    cuda.check(cuda.cudaEventRecord(event, stream), "cudaEventRecord");
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_.erase(std::remove(outstanding_.begin(), outstanding_.end(), work),
                       outstanding_.end());
    throw_if_broken(work->what());  // the watchdog's cause explains a failed enqueue better
    try {
      throw;
    } catch (const Error& e) {  // NCCL's or the runtime's failure: named with the operation
      throw Error(work->what() + ": " + e.what());
    }
  }
  return work;  // the watchdog finds it at its next round
}

NcclCommunicator::WorkPtr NcclCommunicator::allreduce(const BufferView& b, ReduceOp op) {
  check_reduce_op(op, b.dtype);
  return enqueue("allreduce", {b}, [&](const Nccl& nccl, CudaStream s) {
    const std::string what = "allreduce";
    nccl.check(nccl.ncclAllReduce(b.data, b.data, b.numel, nccl.dtype(b.dtype, what),
                                  nccl.op(op, what), comm_, s),
               "ncclAllReduce");
  });
}

NcclCommunicator::WorkPtr NcclCommunicator::broadcast(const BufferView& b, int root) {
  check_peer(root, "root", "broadcast");
  return enqueue("broadcast", {b}, [&](const Nccl& nccl, CudaStream s) {
    nccl.check(nccl.ncclBroadcast(b.data, b.data, b.numel, nccl.dtype(b.dtype, "broadcast"), root,
                                  comm_, s),
               "ncclBroadcast");
  });
}

NcclCommunicator::WorkPtr NcclCommunicator::reduce(const BufferView& b, ReduceOp op, int root) {
  check_reduce_op(op, b.dtype);
  check_peer(root, "root", "reduce");
  return enqueue("reduce", {b}, [&](const Nccl& nccl, CudaStream s) {
    nccl.check(nccl.ncclReduce(b.data, b.data, b.numel, nccl.dtype(b.dtype, "reduce"),
                               nccl.op(op, "reduce"), root, comm_, s),
               "ncclReduce");
  });
}

NcclCommunicator::WorkPtr NcclCommunicator::allgather(const BufferView& in, const Views& outs) {
  count_is(outs, size(), "allgather");
  same_kind(outs, in, "allgather");
  return enqueue("allgather", with(outs, in), [&](const Nccl& nccl, CudaStream s) {
    const NcclDataType dtype = nccl.dtype(in.dtype, "allgather");
    if (back_to_back(outs)) {  // all_gather_into_tensor: NCCL's own allgather
      nccl.check(nccl.ncclAllGather(in.data, outs[0].data, in.numel, dtype, comm_, s),
                 "ncclAllGather");
      return;
    }
    grouped(nccl, "allgather", [&] {  // separate outputs: rank r broadcasts into outs[r]
      for (int r = 0; r < size(); ++r) {
        const void* from = r == rank() ? in.data : outs[r].data;
        nccl.check(nccl.ncclBroadcast(from, outs[r].data, in.numel, dtype, r, comm_, s),
                   "ncclBroadcast");
      }
    });
  });
}

NcclCommunicator::WorkPtr NcclCommunicator::reduce_scatter(const Views& ins, const BufferView& out,
                                                           ReduceOp op) {
  count_is(ins, size(), "reduce_scatter");
  same_kind(ins, out, "reduce_scatter");
  check_reduce_op(op, out.dtype);
  return enqueue("reduce_scatter", with(ins, out), [&](const Nccl& nccl, CudaStream s) {
    const NcclDataType dtype = nccl.dtype(out.dtype, "reduce_scatter");
    const NcclRedOp nop = nccl.op(op, "reduce_scatter");
    if (back_to_back(ins)) {  // reduce_scatter_tensor: NCCL's own reduce-scatter
      nccl.check(nccl.ncclReduceScatter(ins[0].data, out.data, out.numel, dtype, nop, comm_, s),
                 "ncclReduceScatter");
      return;
    }
    grouped(nccl, "reduce_scatter", [&] {  // separate inputs: ins[r] reduced into rank r's out
      for (int r = 0; r < size(); ++r) {
        nccl.check(nccl.ncclReduce(ins[r].data, out.data, out.numel, dtype, nop, r, comm_, s),
                   "ncclReduce");
      }
    });
  });
}

NcclCommunicator::WorkPtr NcclCommunicator::gather(const BufferView& in, const Views& outs,
                                                   int root) {
  check_peer(root, "root", "gather");
  if (rank() == root) {
    count_is(outs, size(), "gather");
    same_kind(outs, in, "gather");
  }
  return enqueue("gather", with(outs, in), [&](const Nccl& nccl, CudaStream s) {
    const NcclDataType dtype = nccl.dtype(in.dtype, "gather");
    if (rank() != root) {
      nccl.check(nccl.ncclSend(in.data, in.numel, dtype, root, comm_, s), "ncclSend");
      return;
    }
    grouped(nccl, "gather", [&] {
      for (int r = 0; r < size(); ++r) {
        if (r != root) {
          nccl.check(nccl.ncclRecv(outs[r].data, in.numel, dtype, r, comm_, s), "ncclRecv");
        }
      }
    });
    copy_on_stream(outs[root], in, s, "gather");
  });
}

NcclCommunicator::WorkPtr NcclCommunicator::scatter(const Views& ins, const BufferView& out,
                                                    int root) {
  check_peer(root, "root", "scatter");
  if (rank() == root) {
    count_is(ins, size(), "scatter");
    same_kind(ins, out, "scatter");
  }
  return enqueue("scatter", with(ins, out), [&](const Nccl& nccl, CudaStream s) {
    const NcclDataType dtype = nccl.dtype(out.dtype, "scatter");
    if (rank() != root) {
      nccl.check(nccl.ncclRecv(out.data, out.numel, dtype, root, comm_, s), "ncclRecv");
      return;
    }
    grouped(nccl, "scatter", [&] {
      for (int r = 0; r < size(); ++r) {
        if (r != root) {
          nccl.check(nccl.ncclSend(ins[r].data, out.numel, dtype, r, comm_, s), "ncclSend");
        }
      }
    });
    copy_on_stream(out, ins[root], s, "scatter");
  });
}

NcclCommunicator::WorkPtr NcclCommunicator::all_to_all(const Views& ins, const Views& outs) {
  count_is(ins, size(), "all_to_all");
  count_is(outs, size(), "all_to_all");
  for (const auto& b : outs) {
    if (b.dtype != ins[0].dtype) throw std::invalid_argument("all_to_all: mixed dtypes");
  }
  Views all = ins;
  all.insert(all.end(), outs.begin(), outs.end());
  return enqueue("all_to_all", all, [&](const Nccl& nccl, CudaStream s) {
    const NcclDataType dtype = nccl.dtype(ins[0].dtype, "all_to_all");
    if (outs[rank()].numel != ins[rank()].numel) {
      throw std::invalid_argument("all_to_all: rank " + std::to_string(rank()) + " sends " +
                                  std::to_string(ins[rank()].numel) +
                                  " elements to itself but expects " +
                                  std::to_string(outs[rank()].numel));
    }
    grouped(nccl, "all_to_all", [&] {
      for (int r = 0; r < size(); ++r) {
        if (r == rank()) continue;
        nccl.check(nccl.ncclSend(ins[r].data, ins[r].numel, dtype, r, comm_, s), "ncclSend");
        nccl.check(nccl.ncclRecv(outs[r].data, outs[r].numel, dtype, r, comm_, s), "ncclRecv");
      }
    });
    copy_on_stream(outs[rank()], ins[rank()], s, "all_to_all");
  });
}

NcclCommunicator::WorkPtr NcclCommunicator::send(const BufferView& b, int peer) {
  check_peer(peer, "dst", "send");
  if (peer == rank()) throw std::invalid_argument("send: a rank cannot send to itself");
  return enqueue("send", {b}, [&](const Nccl& nccl, CudaStream s) {
    nccl.check(nccl.ncclSend(b.data, b.numel, nccl.dtype(b.dtype, "send"), peer, comm_, s),
               "ncclSend");
  });
}

NcclCommunicator::WorkPtr NcclCommunicator::recv(const BufferView& b, int peer) {
  check_peer(peer, "src", "recv");
  if (peer == rank()) throw std::invalid_argument("recv: a rank cannot receive from itself");
  return enqueue("recv", {b}, [&](const Nccl& nccl, CudaStream s) {
    nccl.check(nccl.ncclRecv(b.data, b.numel, nccl.dtype(b.dtype, "recv"), peer, comm_, s),
               "ncclRecv");
  });
}

// ---- failure, watchdog, teardown ----------------------------------------------------------

void NcclCommunicator::fail(const std::string& cause, bool timed_out, const NcclWork* culprit) {
  std::deque<WorkPtr> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.empty() || comm_released_) return;
    broken_ = cause;
    broken_by_timeout_ = timed_out;
    comm_released_ = true;
    failed.swap(outstanding_);
  }
  for (auto& work : failed) {  // each names itself, and the cause unless it is the culprit
    const bool own = work.get() == culprit;
    work->fail(
        own ? error_of(cause, timed_out)
            : error_of(work->what() + ": the NCCL communicator was aborted: " + cause, timed_out));
  }
  // Outside mu_: an enqueue stuck inside NCCL holds enqueue_mu_, and abort is what frees it.
  std::lock_guard<std::mutex> release(release_mu_);
  nccl().ncclCommAbort(comm_);
  wake_.notify_all();
}

std::string NcclCommunicator::broken_reason() {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void NcclCommunicator::abort(const std::string& reason) { fail(reason, false, nullptr); }

void NcclCommunicator::check_outstanding() {
  const auto& nccl = gpu::nccl();
  NcclResult async = kNcclSuccess;
  {
    std::lock_guard<std::mutex> release(release_mu_);  // comm_ stays alive meanwhile
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (comm_released_) return;
    }
    const NcclResult queried = nccl.ncclCommGetAsyncError(comm_, &async);
    if (queried != kNcclSuccess) async = queried;
  }
  if (async != kNcclSuccess && async != kNcclInProgress) {
    const char* message = nccl.ncclGetErrorString(async);
    fail("rank " + std::to_string(named_rank()) + ": NCCL reported an asynchronous error (group " +
             options_.group + "): " + (message ? message : "unknown error") + " (NCCL error " +
             std::to_string(async) + ")",
         false, nullptr);
    return;
  }
  std::vector<WorkPtr> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.assign(outstanding_.begin(), outstanding_.end());
  }
  std::unordered_set<const NcclWork*> finished;
  const NcclWork* late = nullptr;  // the oldest operation past the timeout
  for (const auto& work : pending) {
    if (work->has_event() && work->poll()) {
      finished.insert(work.get());
    } else if (!late && work->age_ms() > options_.timeout_ms) {
      late = work.get();
    }
  }
  if (late) {
    fail(late->what() + " timed out after " + std::to_string(options_.timeout_ms) +
             " ms: not complete on cuda:" + std::to_string(device()) +
             " (a peer that did not join it, or a stream that never reached it); the NCCL "
             "communicator was aborted",
         true, late);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  outstanding_.erase(std::remove_if(outstanding_.begin(), outstanding_.end(),
                                    [&](const WorkPtr& w) { return finished.count(w.get()); }),
                     outstanding_.end());
}

void NcclCommunicator::watchdog() {
  // Polls often enough to abort within ~1/8 of the timeout, but at most every 100 ms.
  const auto poll = std::chrono::milliseconds(std::clamp<int64_t>(options_.timeout_ms / 8, 1, 100));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_ && !comm_released_) {
    wake_.wait_for(lock, poll);
    if (stopping_ || comm_released_) break;
    lock.unlock();
    check_outstanding();
    lock.lock();
  }
}

void NcclCommunicator::destroy() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
  }
  // Lets the outstanding operations finish, sweeping them as the watchdog does (which aborts
  // them past the timeout).
  const Deadline deadline(options_.timeout_ms);
  for (;;) {
    check_outstanding();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (outstanding_.empty() || comm_released_) break;
    }
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  bool release = false;
  bool clean = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    release = !comm_released_;
    clean = outstanding_.empty();
    comm_released_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (release) {
    std::lock_guard<std::mutex> lock(release_mu_);
    const auto& nccl = gpu::nccl();
    clean ? nccl.ncclCommDestroy(comm_) : nccl.ncclCommAbort(comm_);
  }
}

}  // namespace pscore::gpu
