// pscore._C (part of pscore._ext): transports (for rendezvous from Python) and the ProcessGroup's
// collectives; the enums they take are pscore._types' (bindings/types_module.cc). Buffers cross as
// pscore.buffer.BufferView (bindings/buffer_view_caster.h); every call that can block releases
// the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "bindings/buffer_lists.h"
#include "bindings/buffer_view_caster.h"
#include "bindings/errors.h"
#include "bindings/fast_barrier.h"
#include "bindings/fast_view.h"
#include "bindings/gil.h"
#include "bindings/modules.h"
#include "bindings/rank_blocks.h"
#include "bindings/user_buffer.h"
#include "bindings/work.h"
#include "collectives/process_group.h"
#include "common/auth.h"
#include "common/cores.h"
#include "common/signal_pipe.h"
#include "gpu/staging.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace py = pybind11;
using namespace pscore;

namespace {

using Views = std::vector<BufferView>;
// The single-buffer collectives take the caller's objects (bindings/user_buffer.h).
using Tensor = bindings::UserBuffer<bindings::kTensorArg>;
using Input = bindings::UserBuffer<bindings::kInputArg>;
using Output = bindings::UserBuffer<bindings::kOutputArg>;
using ReadTensor = bindings::UserBuffer<bindings::kReadTensorArg>;
using TensorList = bindings::UserBuffers<bindings::kTensorListArg>;
using InputList = bindings::UserBuffers<bindings::kInputListArg>;
using GatherList = bindings::UserBuffers<bindings::kGatherListArg>;
using ScatterList = bindings::UserBuffers<bindings::kScatterListArg>;
using OutputTensorList = bindings::UserBuffers<bindings::kOutputTensorListArg>;
using InputTensorList = bindings::UserBuffers<bindings::kInputTensorListArg>;
using Gil = bindings::ReleaseGil;
using PG = ProcessGroup;
using gpu::Copy;

// Each collective runs on host memory: a CPU tensor's own, or pinned blocks standing for a CUDA
// tensor's (gpu/staging.h: copied on the caller's stream, the host collective waited for before
// the copy back, so an async call returns a done Work).

// An in-place collective on b (chunk by chunk when staged).
template <class Call>
PG::WorkPtr in_place(PG& g, const BufferView& b, Copy copy, const char* what, Call call) {
  if (b.on_host()) return call(b.data, b.numel);  // the latency path: nothing more
  PG::WorkPtr work;
  gpu::run_in_place(g.staging_pool(), b, copy, what, g.options().timeout_ms,
                    [&](void* host, size_t count) {
                      work = call(host, count);
                      if (work) work->wait();  // the copy back needs the result
                    });
  return work;
}

// A collective on `buffers`: host[i] stands for buffers[i], whose bytes cross as copies[i].
template <class Call>
PG::WorkPtr staged(PG& g, const std::vector<const BufferView*>& buffers,
                   const std::vector<Copy>& copies, const char* what, Call call) {
  const bool cuda = gpu::on_cuda(buffers, what);
  PG::WorkPtr work;
  gpu::run_staged(g.staging_pool(), buffers, copies, what, g.options().timeout_ms,
                  [&](const std::vector<void*>& host) {
                    work = call(host);
                    if (work && cuda) work->wait();  // the copy back needs the result
                  });
  return work;
}

// `head` then `rest` as staged() takes them.
template <class Call>
PG::WorkPtr staged(PG& g, std::initializer_list<const BufferView*> head, Copy head_copy,
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
PG::WorkPtr in_out(PG& g, const BufferView& in, const BufferView& out, const char* what,
                   Call call) {
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

void bind_transports(py::module_& m) {
  const TcpOptions tcp;  // the keyword defaults below are the C++ structs'
  const ShmOptions shm;
  py::class_<Transport, std::shared_ptr<Transport>>(m, "Transport")
      .def_property_readonly("name", &Transport::name)
      .def_property_readonly("rank", &Transport::rank)
      .def_property_readonly("size", &Transport::size);

  py::class_<TcpTransport, Transport, std::shared_ptr<TcpTransport>>(m, "TcpTransport")
      .def(py::init([](int rank, int size, const std::string& host, int port,
                       const std::string& job_id, int buffer_bytes,
                       std::optional<std::string> auth_token, std::optional<bool> insecure,
                       int epoll_min_fds) {
             TcpOptions o;
             o.host = host;
             o.port = port;
             o.job_id = job_id;
             o.buffer_bytes = buffer_bytes;
             o.epoll_min_fds = epoll_min_fds;
             // None: PSCORE_AUTH_TOKEN / PSCORE_AUTH_TOKEN_FILE and PSCORE_INSECURE decide.
             o.auth_token = auth_token ? *auth_token : auth::token_from_env();
             o.insecure = insecure ? *insecure : auth::insecure_from_env();
             return std::make_shared<TcpTransport>(rank, size, o);
           }),
           py::arg("rank"), py::arg("size"), py::arg("host") = tcp.host, py::arg("port") = tcp.port,
           py::arg("job_id") = tcp.job_id, py::arg("buffer_bytes") = tcp.buffer_bytes,
           py::arg("auth_token") = py::none(), py::arg("insecure") = py::none(),
           py::arg("epoll_min_fds") = tcp.epoll_min_fds)
      .def_property_readonly("port", &TcpTransport::port)
      .def("connect", &TcpTransport::connect, py::arg("hosts"), py::arg("ports"),
           py::arg("timeout_ms"), Gil());

  py::class_<ShmTransport, Transport, std::shared_ptr<ShmTransport>>(m, "ShmTransport")
      .def(py::init([](int rank, int size, const std::string& job_id, uint64_t ring_bytes,
                       uint64_t p2p_ring_bytes, uint64_t single_copy_bytes,
                       uint64_t single_copy_reduce_bytes) {
             ShmOptions o;
             o.job_id = job_id;
             o.ring_bytes = ring_bytes;
             o.p2p_ring_bytes = p2p_ring_bytes;
             o.single_copy = {single_copy_bytes, single_copy_reduce_bytes};
             return std::make_shared<ShmTransport>(rank, size, o);
           }),
           py::arg("rank"), py::arg("size"), py::arg("job_id") = shm.job_id,
           py::arg("ring_bytes") = shm.ring_bytes, py::arg("p2p_ring_bytes") = shm.p2p_ring_bytes,
           py::arg("single_copy_bytes") = shm.single_copy.moved,
           py::arg("single_copy_reduce_bytes") = shm.single_copy.reduced)
      .def("single_copy_from", &ShmTransport::single_copy_from, py::arg("peer"))
      .def_property_readonly("segment_name", &ShmTransport::segment_name)
      .def_property_readonly("token", &ShmTransport::token)
      .def("connect", &ShmTransport::connect, py::arg("names"), py::arg("tokens"), Gil())
      .def("unlink", &ShmTransport::unlink);
}

void bind_task_work(py::module_& m) {
  bindings::bind_work<TaskWork>(m, "Work").def_property_readonly("source", &TaskWork::source);
}

void bind_progress(py::module_& m) {
  py::class_<OpSnapshot>(m, "OpSnapshot")
      .def_readonly("entered", &OpSnapshot::entered)
      .def_readonly("running", &OpSnapshot::running)
      .def_property_readonly("kind", [](const OpSnapshot& s) { return op_kind_name(s.kind); })
      .def_readonly("dtype", &OpSnapshot::dtype)
      .def_readonly("nbytes", &OpSnapshot::nbytes)
      .def_readonly("elapsed_us", &OpSnapshot::elapsed_us)
      .def_readonly("waiting_on", &OpSnapshot::waiting_on);
  m.def("ranks_fit_cores", &ranks_fit_cores, py::arg("ranks"),
        "Whether this many ranks fit on this host's cores (each may poll on a core of its own).");
  m.def("install_signal_pipe", &install_signal_pipe, py::arg("signum"),
        "Handles signum (when it has no handler yet) by writing a byte to a pipe; returns the "
        "pipe's read end, or -1 when the signal already had a handler.");
}

// The list collectives' checks for Python's NCCL path, on its views (the bindings below make the
// same calls on every group).
void bind_list_checks(py::module_& m) {
  m.def("check_all_gather", &bindings::check_all_gather, py::arg("tensor"), py::arg("tensor_list"),
        py::arg("ranks"), "Raises what all_gather raises for these lists.");
  m.def("check_reduce_scatter", &bindings::check_reduce_scatter, py::arg("output"),
        py::arg("input_list"), py::arg("ranks"), "Raises what reduce_scatter raises for these.");
  m.def("check_gather", &bindings::check_gather, py::arg("tensor"), py::arg("gather_list"),
        py::arg("given"), py::arg("at_root"), py::arg("ranks"),
        "Raises what gather raises for these (given: the caller passed a list).");
  m.def("check_scatter", &bindings::check_scatter, py::arg("tensor"), py::arg("scatter_list"),
        py::arg("given"), py::arg("at_root"), py::arg("ranks"),
        "Raises what scatter raises for these (given: the caller passed a list).");
  m.def("check_all_to_all", &bindings::check_all_to_all, py::arg("output_tensor_list"),
        py::arg("input_tensor_list"), py::arg("ranks"), "Raises what all_to_all raises for these.");
}

void bind_process_group(py::module_& m) {
  py::enum_<AllreduceAlgorithm>(m, "AllreduceAlgorithm",
                                "How allreduces run (csrc/collectives/process_group.h).")
      .value("AUTO", AllreduceAlgorithm::kAuto)
      .value("RECURSIVE_DOUBLING", AllreduceAlgorithm::kRecursiveDoubling)
      .value("RING", AllreduceAlgorithm::kRing)
      .value("HALVING_DOUBLING", AllreduceAlgorithm::kHalvingDoubling);
  py::enum_<AllgatherAlgorithm>(m, "AllgatherAlgorithm",
                                "How allgathers run (csrc/collectives/process_group.h).")
      .value("AUTO", AllgatherAlgorithm::kAuto)
      .value("RING", AllgatherAlgorithm::kRing)
      .value("RECURSIVE_DOUBLING", AllgatherAlgorithm::kRecursiveDoubling);
  py::enum_<ReduceScatterAlgorithm>(m, "ReduceScatterAlgorithm",
                                    "How reduce_scatters run (csrc/collectives/process_group.h).")
      .value("AUTO", ReduceScatterAlgorithm::kAuto)
      .value("RING", ReduceScatterAlgorithm::kRing)
      .value("RECURSIVE_HALVING", ReduceScatterAlgorithm::kRecursiveHalving);
  const GroupOptions defaults;  // the keyword defaults below are the C++ struct's
  py::class_<PG, std::shared_ptr<PG>>(m, "ProcessGroup")
      .def(
          py::init([](std::shared_ptr<Transport> t, int64_t timeout_ms, int spin_us, int yield_us,
                      size_t small_allreduce_bytes, AllreduceAlgorithm allreduce_algorithm,
                      int64_t large_broadcast_bytes, AllgatherAlgorithm allgather_algorithm,
                      ReduceScatterAlgorithm reduce_scatter_algorithm, int ranks_fit_cores) {
            GroupOptions o;
            o.timeout_ms = timeout_ms;
            o.spin_us = spin_us;
            o.yield_us = yield_us;
            o.small_allreduce_bytes = small_allreduce_bytes;
            o.allreduce_algorithm = allreduce_algorithm;
            o.large_broadcast_bytes = large_broadcast_bytes;
            o.allgather_algorithm = allgather_algorithm;
            o.reduce_scatter_algorithm = reduce_scatter_algorithm;
            o.ranks_fit_cores = ranks_fit_cores;
            return std::make_shared<PG>(std::move(t), o);
          }),
          py::arg("transport"), py::arg("timeout_ms") = defaults.timeout_ms,
          py::arg("spin_us") = defaults.spin_us, py::arg("yield_us") = defaults.yield_us,
          py::arg("small_allreduce_bytes") = defaults.small_allreduce_bytes,
          py::arg_v("allreduce_algorithm", defaults.allreduce_algorithm, "AllreduceAlgorithm.AUTO"),
          py::arg("large_broadcast_bytes") = defaults.large_broadcast_bytes,
          py::arg_v("allgather_algorithm", defaults.allgather_algorithm, "AllgatherAlgorithm.AUTO"),
          py::arg_v("reduce_scatter_algorithm", defaults.reduce_scatter_algorithm,
                    "ReduceScatterAlgorithm.AUTO"),
          py::arg("ranks_fit_cores") = defaults.ranks_fit_cores)
      .def_property_readonly("rank", &PG::rank)
      .def_property_readonly("size", &PG::size)
      .def_property_readonly("transport", &PG::transport_name)
      .def_property_readonly("ranks_fit_cores", &PG::ranks_fit_cores,
                             "Whether auto's algorithm choices take the ranks to fit on the cores "
                             "(as every rank agreed at connect).")
      .def("allreduce_algorithm", &PG::allreduce_algorithm, py::arg("count"), py::arg("dtype"),
           "The algorithm an allreduce of count elements of dtype takes in this group.")
      .def("allgather_algorithm", &PG::allgather_algorithm, py::arg("count"), py::arg("dtype"),
           "The algorithm an allgather of count elements per rank takes in this group.")
      .def("reduce_scatter_algorithm", &PG::reduce_scatter_algorithm, py::arg("count"),
           py::arg("dtype"),
           "The algorithm a reduce_scatter of count elements per rank takes in this group.")
      .def(
          "allreduce",
          [](PG& g, const Tensor& t, ReduceOp op, bool async) {
            const BufferView& b = t.view;
            return in_place(g, b, Copy::kInOut, "all_reduce", [&](void* h, size_t n) {
              return g.allreduce(h, n, b.dtype, op, async);
            });
          },
          Gil())
      .def(
          "broadcast",
          [](PG& g, const Tensor& t, int root, bool async) {
            const BufferView& b = t.view;
            const Copy copy = g.rank() == root ? Copy::kIn : Copy::kOut;
            return in_place(g, b, copy, "broadcast", [&](void* h, size_t n) {
              return g.broadcast(h, n, b.dtype, root, async);
            });
          },
          Gil())
      .def(
          "reduce",
          [](PG& g, const Tensor& t, ReduceOp op, int root, bool async) {
            const BufferView& b = t.view;
            // Only the root's buffer changes (the other ranks' stay as they were).
            const Copy copy = g.rank() == root ? Copy::kInOut : Copy::kIn;
            return in_place(g, b, copy, "reduce", [&](void* h, size_t n) {
              return g.reduce(h, n, b.dtype, op, root, async);
            });
          },
          Gil())
      .def(
          "allgather",
          [](PG& g, const ReadTensor& tensor, const TensorList& tensor_list, bool async) {
            const BufferView& in = tensor.view;
            const Views& outs = tensor_list.views;
            bindings::check_all_gather(in, outs, g.size());
            return staged(g, {&in}, Copy::kIn, outs, Copy::kOut, "all_gather", [&](const auto& h) {
              return g.allgather(h[0], in.numel, in.dtype, slice(h, 1, outs.size()), async);
            });
          },
          py::arg("tensor"), py::arg("tensor_list"), py::arg("async_op"), Gil(),
          "all_gather into one output per rank (a list), rank r's tensor into entry r.")
      .def(
          "reduce_scatter",
          [](PG& g, const Output& output, const InputList& input_list, ReduceOp op, bool async) {
            const BufferView& out = output.view;
            const Views& ins = input_list.views;
            bindings::check_reduce_scatter(out, ins, g.size());
            return staged(g, {&out}, Copy::kOut, ins, Copy::kIn, "reduce_scatter",
                          [&](const auto& h) {
                            return g.reduce_scatter(const_slice(h, 1, ins.size()), h[0], out.numel,
                                                    out.dtype, op, async);
                          });
          },
          py::arg("output"), py::arg("input_list"), py::arg("op"), py::arg("async_op"), Gil(),
          "reduce_scatter of one input per rank (a list): entry r reduced into rank r's output.")
      .def(
          "gather",
          [](PG& g, const ReadTensor& tensor, const GatherList& gather_list, int root, bool async) {
            const BufferView& in = tensor.view;
            const Views& outs = gather_list.views;
            bindings::check_gather(in, outs, gather_list.given, g.rank() == root, g.size());
            return staged(g, {&in}, Copy::kIn, outs, Copy::kOut, "gather", [&](const auto& h) {
              return g.gather(h[0], in.numel, in.dtype, slice(h, 1, outs.size()), root, async);
            });
          },
          py::arg("tensor"), py::arg("gather_list"), py::arg("root"), py::arg("async_op"), Gil(),
          "gather into the root's gather_list (None elsewhere), rank r's tensor into entry r.")
      .def(
          "scatter",
          [](PG& g, const Tensor& tensor, const ScatterList& scatter_list, int root, bool async) {
            const BufferView& out = tensor.view;
            const Views& ins = scatter_list.views;
            bindings::check_scatter(out, ins, scatter_list.given, g.rank() == root, g.size());
            return staged(g, {&out}, Copy::kOut, ins, Copy::kIn, "scatter", [&](const auto& h) {
              return g.scatter(const_slice(h, 1, ins.size()), h[0], out.numel, out.dtype, root,
                               async);
            });
          },
          py::arg("tensor"), py::arg("scatter_list"), py::arg("root"), py::arg("async_op"), Gil(),
          "scatter of the root's scatter_list (None elsewhere), entry r into rank r's tensor.")
      .def(
          "all_to_all",
          [](PG& g, const OutputTensorList& output_list, const InputTensorList& input_list,
             bool async) {
            const Views &ins = input_list.views, &outs = output_list.views;
            bindings::check_all_to_all(outs, ins, g.size());
            const DType d = ins.front().dtype;
            std::vector<const BufferView*> buffers;
            std::vector<Copy> copies;
            for (const auto& v : ins) buffers.push_back(&v), copies.push_back(Copy::kIn);
            for (const auto& v : outs) buffers.push_back(&v), copies.push_back(Copy::kOut);
            return staged(g, buffers, copies, "all_to_all", [&](const auto& h) {
              return g.all_to_all(const_slice(h, 0, ins.size()), counts(ins),
                                  slice(h, ins.size(), outs.size()), counts(outs), d, async);
            });
          },
          py::arg("output_tensor_list"), py::arg("input_tensor_list"), py::arg("async_op"), Gil(),
          "all_to_all of lists: input entry r to rank r, rank r's into output entry r.")
      .def(
          "allgather_into",
          [](PG& g, const Input& input, const Output& output, bool async) {
            const BufferView &in = input.view, &out = output.view;
            const char* op = "all_gather_into_tensor";
            const auto n = static_cast<size_t>(g.size());
            bindings::check_same_dtype(out, "output", in, "input", op);
            bindings::check_stacks(out, "output", in, n, op);
            return in_out(g, in, out, op, [&](void* h_in, void* h_out) {
              return g.allgather(h_in, in.numel, in.dtype,
                                 bindings::equal_blocks(h_out, n, in.nbytes), async);
            });
          },
          py::arg("input"), py::arg("output"), py::arg("async_op"), Gil(),
          "all_gather into one output of size() blocks, rank r's input in block r.")
      .def(
          "reduce_scatter_from",
          [](PG& g, const Input& input, const Output& output, ReduceOp rop, bool async) {
            const BufferView &in = input.view, &out = output.view;
            const char* op = "reduce_scatter_tensor";
            const auto n = static_cast<size_t>(g.size());
            bindings::check_same_dtype(in, "input", out, "output", op);
            bindings::check_stacks(in, "input", out, n, op);
            return in_out(g, in, out, op, [&](void* h_in, void* h_out) {
              const void* base = h_in;
              return g.reduce_scatter(bindings::equal_blocks(base, n, out.nbytes), h_out, out.numel,
                                      out.dtype, rop, async);
            });
          },
          py::arg("input"), py::arg("output"), py::arg("op"), py::arg("async_op"), Gil(),
          "reduce_scatter of one input of size() blocks: block r reduced into rank r's output.")
      .def(
          "all_to_all_single",
          [](PG& g, const Input& input, const Output& output, const bindings::RankCounts& in_counts,
             const bindings::RankCounts& out_counts, bool async) {
            const BufferView &in = input.view, &out = output.view;
            const char* op = "all_to_all_single";
            const auto n = static_cast<size_t>(g.size());
            bindings::check_same_dtype(in, "input", out, "output", op);
            auto sends = bindings::rank_counts(in, "input", in_counts, n, op);
            auto recvs = bindings::rank_counts(out, "output", out_counts, n, op);
            return in_out(g, in, out, op, [&](void* h_in, void* h_out) {
              const size_t item = dtype_size(in.dtype);
              const void* base = h_in;
              auto ins = bindings::blocks(base, sends, item);
              auto outs = bindings::blocks(h_out, recvs, item);
              return g.all_to_all(std::move(ins), std::move(sends), std::move(outs),
                                  std::move(recvs), in.dtype, async);  // called once
            });
          },
          py::arg("input"), py::arg("output"), py::arg("input_counts"), py::arg("output_counts"),
          py::arg("async_op"), Gil(),
          "all_to_all on one input and one output, split into input_counts / output_counts "
          "elements per rank (None or empty: size() equal blocks).")
      .def("barrier", &PG::barrier, py::arg("async_op"), Gil())
      .def(
          "send",
          [](PG& g, const BufferView& b, int dst, uint32_t tag, bool async) {
            return staged(g, {&b}, Copy::kIn, {}, Copy::kNone, "send", [&](const auto& h) {
              return g.send(h[0], b.numel, b.dtype, dst, tag, async);
            });
          },
          Gil())
      .def(
          "recv",
          [](PG& g, const BufferView& b, int src, uint32_t tag, bool async) {
            return staged(g, {&b}, Copy::kOut, {}, Copy::kNone, "recv", [&](const auto& h) {
              return g.recv(h[0], b.numel, b.dtype, src, tag, async);
            });
          },
          Gil())
      .def(
          "recv_any",
          [](PG& g, const BufferView& b, uint32_t tag, bool async) {
            return staged(g, {&b}, Copy::kOut, {}, Copy::kNone, "recv", [&](const auto& h) {
              return g.recv_any(h[0], b.numel, b.dtype, tag, async);
            });
          },
          Gil())
      .def("abort", &PG::abort, Gil())
      .def("broken_reason", &PG::broken_reason)
      .def("progress", &PG::progress);
}

}  // namespace

void bindings::init_core(py::module_& m) {
  m.doc() = "pscore core: transports and collectives";
  bind_transports(m);
  bind_task_work(m);
  bind_progress(m);
  bind_list_checks(m);
  bind_process_group(m);
  bindings::bind_fast_barrier(m);
  bindings::bind_fast_view(m);
}
