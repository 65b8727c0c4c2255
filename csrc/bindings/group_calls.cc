// The collectives' bodies for the bindings (group_calls.h).
#include "bindings/group_calls.h"

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "bindings/buffer_lists.h"
#include "gpu/staging.h"

namespace pscore::bindings::group_calls {

namespace {

using Views = std::vector<BufferView>;
using PG = ProcessGroup;
using gpu::Copy;

// Each collective runs on host memory: a CPU tensor's own, or pinned blocks standing for a CUDA
// tensor's (gpu/staging.h: copied on the caller's stream, the host collective waited for before
// the copy back, so an async call returns a done Work).

// An in-place collective on b (chunk by chunk when staged).
template <class Call>
WorkPtr in_place(PG& g, const BufferView& b, Copy copy, const char* what, Call call) {
  if (b.on_host()) return call(b.data, b.numel);  // the latency path: nothing more
  WorkPtr work;
  gpu::run_in_place(g.staging_pool(), b, copy, what, g.options().timeout_ms,
                    [&](void* host, size_t count) {
                      work = call(host, count);
                      if (work) work->wait();  // the copy back needs the result
                    });
  return work;
}

// A collective on `buffers`: host[i] stands for buffers[i], whose bytes cross as copies[i].
template <class Call>
WorkPtr staged(PG& g, const std::vector<const BufferView*>& buffers,
               const std::vector<Copy>& copies, const char* what, Call call) {
  const bool cuda = gpu::on_cuda(buffers, what);
  WorkPtr work;
  gpu::run_staged(g.staging_pool(), buffers, copies, what, g.options().timeout_ms,
                  [&](const std::vector<void*>& host) {
                    work = call(host);
                    if (work && cuda) work->wait();  // the copy back needs the result
                  });
  return work;
}

// `head` then `rest` as staged() takes them.
template <class Call>
WorkPtr staged(PG& g, std::initializer_list<const BufferView*> head, Copy head_copy,
               const Views& rest, Copy rest_copy, const char* what, Call call) {
  bool host = std::all_of(rest.begin(), rest.end(), [](const auto& v) { return v.on_host(); });
  for (const BufferView* v : head) host = host && v->on_host();
  if (host) {  // the latency path: the buffers' own memory
    std::vector<void*> memory;
    memory.reserve(head.size() + rest.size());
    for (const BufferView* v : head) memory.push_back(v->data);
    for (const auto& v : rest) memory.push_back(v.data);
    return call(memory);
  }
  std::vector<const BufferView*> buffers(head);
  std::vector<Copy> copies(head.size(), head_copy);
  for (const auto& v : rest) buffers.push_back(&v), copies.push_back(rest_copy);
  return staged(g, buffers, copies, what, call);
}

// A collective on two whole buffers, `in` read and `out` written: call(in_host, out_host).
template <class Call>
WorkPtr in_out(PG& g, const BufferView& in, const BufferView& out, const char* what, Call call) {
  if (in.on_host() && out.on_host()) return call(in.data, out.data);  // the latency path
  return staged(g, {&in, &out}, {Copy::kIn, Copy::kOut}, what,
                [&](const std::vector<void*>& h) { return call(h[0], h[1]); });
}

std::vector<void*> slice(const std::vector<void*>& host, size_t from, size_t n) {
  return {host.begin() + static_cast<ptrdiff_t>(from),
          host.begin() + static_cast<ptrdiff_t>(from + n)};
}

std::vector<const void*> const_slice(const std::vector<void*>& host, size_t from, size_t n) {
  return {host.begin() + static_cast<ptrdiff_t>(from),
          host.begin() + static_cast<ptrdiff_t>(from + n)};
}

std::vector<size_t> counts(const Views& vs) {
  std::vector<size_t> out;
  out.reserve(vs.size());
  for (const auto& v : vs) out.push_back(v.numel);
  return out;
}

}  // namespace

WorkPtr allreduce(PG& g, const Tensor& tensor, ReduceOp op, bool async) {
  const BufferView& b = tensor.view;
  return in_place(g, b, Copy::kInOut, "all_reduce",
                  [&](void* h, size_t n) { return g.allreduce(h, n, b.dtype, op, async); });
}

WorkPtr broadcast(PG& g, const Tensor& tensor, int root, bool async) {
  const BufferView& b = tensor.view;
  const Copy copy = g.rank() == root ? Copy::kIn : Copy::kOut;
  return in_place(g, b, copy, "broadcast",
                  [&](void* h, size_t n) { return g.broadcast(h, n, b.dtype, root, async); });
}

WorkPtr reduce(PG& g, const Tensor& tensor, ReduceOp op, int root, bool async) {
  const BufferView& b = tensor.view;
  // Only the root's buffer changes (the other ranks' stay as they were).
  const Copy copy = g.rank() == root ? Copy::kInOut : Copy::kIn;
  return in_place(g, b, copy, "reduce",
                  [&](void* h, size_t n) { return g.reduce(h, n, b.dtype, op, root, async); });
}

WorkPtr allgather(PG& g, const ReadTensor& tensor, const TensorList& tensor_list, bool async) {
  const BufferView& in = tensor.view;
  const Views& outs = tensor_list.views;
  check_all_gather(in, outs, g.size());
  return staged(g, {&in}, Copy::kIn, outs, Copy::kOut, "all_gather", [&](const auto& h) {
    return g.allgather(h[0], in.numel, in.dtype, slice(h, 1, outs.size()), async);
  });
}

WorkPtr reduce_scatter(PG& g, const Output& output, const InputList& input_list, ReduceOp op,
                       bool async) {
  const BufferView& out = output.view;
  const Views& ins = input_list.views;
  check_reduce_scatter(out, ins, g.size());
  return staged(g, {&out}, Copy::kOut, ins, Copy::kIn, "reduce_scatter", [&](const auto& h) {
    return g.reduce_scatter(const_slice(h, 1, ins.size()), h[0], out.numel, out.dtype, op, async);
  });
}

WorkPtr gather(PG& g, const ReadTensor& tensor, const GatherList& gather_list, int root,
               bool async) {
  const BufferView& in = tensor.view;
  const Views& outs = gather_list.views;
  check_gather(in, outs, gather_list.given, g.rank() == root, g.size());
  return staged(g, {&in}, Copy::kIn, outs, Copy::kOut, "gather", [&](const auto& h) {
    return g.gather(h[0], in.numel, in.dtype, slice(h, 1, outs.size()), root, async);
  });
}

WorkPtr scatter(PG& g, const Tensor& tensor, const ScatterList& scatter_list, int root,
                bool async) {
  const BufferView& out = tensor.view;
  const Views& ins = scatter_list.views;
  check_scatter(out, ins, scatter_list.given, g.rank() == root, g.size());
  return staged(g, {&out}, Copy::kOut, ins, Copy::kIn, "scatter", [&](const auto& h) {
    return g.scatter(const_slice(h, 1, ins.size()), h[0], out.numel, out.dtype, root, async);
  });
}

WorkPtr all_to_all(PG& g, const OutputTensorList& output_list, const InputTensorList& input_list,
                   bool async) {
  const Views &ins = input_list.views, &outs = output_list.views;
  check_all_to_all(outs, ins, g.size());
  const DType d = ins.front().dtype;
  std::vector<const BufferView*> buffers;
  std::vector<Copy> copies;
  for (const auto& v : ins) buffers.push_back(&v), copies.push_back(Copy::kIn);
  for (const auto& v : outs) buffers.push_back(&v), copies.push_back(Copy::kOut);
  return staged(g, buffers, copies, "all_to_all", [&](const auto& h) {
    return g.all_to_all(const_slice(h, 0, ins.size()), counts(ins),
                        slice(h, ins.size(), outs.size()), counts(outs), d, async);
  });
}

WorkPtr allgather_into(PG& g, const Input& input, const Output& output, bool async) {
  const BufferView &in = input.view, &out = output.view;
  const char* op = "all_gather_into_tensor";
  const auto n = static_cast<size_t>(g.size());
  check_same_dtype(out, "output", in, "input", op);
  check_stacks(out, "output", in, n, op);
  return in_out(g, in, out, op, [&](void* h_in, void* h_out) {
    return g.allgather(h_in, in.numel, in.dtype, equal_blocks(h_out, n, in.nbytes), async);
  });
}

WorkPtr reduce_scatter_from(PG& g, const Input& input, const Output& output, ReduceOp rop,
                            bool async) {
  const BufferView &in = input.view, &out = output.view;
  const char* op = "reduce_scatter_tensor";
  const auto n = static_cast<size_t>(g.size());
  check_same_dtype(in, "input", out, "output", op);
  check_stacks(in, "input", out, n, op);
  return in_out(g, in, out, op, [&](void* h_in, void* h_out) {
    const void* base = h_in;
    return g.reduce_scatter(equal_blocks(base, n, out.nbytes), h_out, out.numel, out.dtype, rop,
                            async);
  });
}

WorkPtr all_to_all_single(PG& g, const Input& input, const Output& output,
                          const RankCounts& input_counts, const RankCounts& output_counts,
                          bool async) {
  const BufferView &in = input.view, &out = output.view;
  const char* op = "all_to_all_single";
  const auto n = static_cast<size_t>(g.size());
  check_same_dtype(in, "input", out, "output", op);
  auto sends = rank_counts(in, "input", input_counts, n, op);
  auto recvs = rank_counts(out, "output", output_counts, n, op);
  return in_out(g, in, out, op, [&](void* h_in, void* h_out) {
    const size_t item = dtype_size(in.dtype);
    const void* base = h_in;
    auto ins = blocks(base, sends, item);
    auto outs = blocks(h_out, recvs, item);
    return g.all_to_all(std::move(ins), std::move(sends), std::move(outs), std::move(recvs),
                        in.dtype, async);  // called once
  });
}

WorkPtr barrier(PG& g, bool async) { return g.barrier(async); }

WorkPtr send(PG& g, const BufferView& b, int dst, uint32_t tag, bool async) {
  return staged(g, {&b}, Copy::kIn, {}, Copy::kNone, "send",
                [&](const auto& h) { return g.send(h[0], b.numel, b.dtype, dst, tag, async); });
}

WorkPtr recv(PG& g, const BufferView& b, int src, uint32_t tag, bool async) {
  return staged(g, {&b}, Copy::kOut, {}, Copy::kNone, "recv",
                [&](const auto& h) { return g.recv(h[0], b.numel, b.dtype, src, tag, async); });
}

WorkPtr recv_any(PG& g, const BufferView& b, uint32_t tag, bool async) {
  return staged(g, {&b}, Copy::kOut, {}, Copy::kNone, "recv",
                [&](const auto& h) { return g.recv_any(h[0], b.numel, b.dtype, tag, async); });
}

}  // namespace pscore::bindings::group_calls
