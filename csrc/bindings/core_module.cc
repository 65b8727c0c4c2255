// pscore._C (part of pscore._ext): transports (for rendezvous from Python) and the ProcessGroup,
// whose collectives are bindings/group_calls.h's, also bound as _C.fast_calls' functions
// (bindings/fast_calls.h); the enums they take are pscore._types' (bindings/types_module.cc).
// Every call that can block releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings/buffer_lists.h"
#include "bindings/buffer_view_caster.h"
#include "bindings/errors.h"
#include "bindings/fast_calls.h"
#include "bindings/fast_view.h"
#include "bindings/gil.h"
#include "bindings/group_calls.h"
#include "bindings/modules.h"
#include "bindings/work.h"
#include "collectives/process_group.h"
#include "common/auth.h"
#include "common/cores.h"
#include "common/signal_pipe.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace py = pybind11;
using namespace pscore;

namespace {

using Gil = bindings::ReleaseGil;
using PG = ProcessGroup;
namespace calls = bindings::group_calls;

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
      .def("allreduce", &calls::allreduce, Gil())
      .def("broadcast", &calls::broadcast, Gil())
      .def("reduce", &calls::reduce, Gil())
      .def("allgather", &calls::allgather, py::arg("tensor"), py::arg("tensor_list"),
           py::arg("async_op"), Gil(),
           "all_gather into one output per rank (a list), rank r's tensor into entry r.")
      .def("reduce_scatter", &calls::reduce_scatter, py::arg("output"), py::arg("input_list"),
           py::arg("op"), py::arg("async_op"), Gil(),
           "reduce_scatter of one input per rank (a list): entry r reduced into rank r's output.")
      .def("gather", &calls::gather, py::arg("tensor"), py::arg("gather_list"), py::arg("root"),
           py::arg("async_op"), Gil(),
           "gather into the root's gather_list (None elsewhere), rank r's tensor into entry r.")
      .def("scatter", &calls::scatter, py::arg("tensor"), py::arg("scatter_list"), py::arg("root"),
           py::arg("async_op"), Gil(),
           "scatter of the root's scatter_list (None elsewhere), entry r into rank r's tensor.")
      .def("all_to_all", &calls::all_to_all, py::arg("output_tensor_list"),
           py::arg("input_tensor_list"), py::arg("async_op"), Gil(),
           "all_to_all of lists: input entry r to rank r, rank r's into output entry r.")
      .def("allgather_into", &calls::allgather_into, py::arg("input"), py::arg("output"),
           py::arg("async_op"), Gil(),
           "all_gather into one output of size() blocks, rank r's input in block r.")
      .def("reduce_scatter_from", &calls::reduce_scatter_from, py::arg("input"), py::arg("output"),
           py::arg("op"), py::arg("async_op"), Gil(),
           "reduce_scatter of one input of size() blocks: block r reduced into rank r's output.")
      .def("all_to_all_single", &calls::all_to_all_single, py::arg("input"), py::arg("output"),
           py::arg("input_counts"), py::arg("output_counts"), py::arg("async_op"), Gil(),
           "all_to_all on one input and one output, split into input_counts / output_counts "
           "elements per rank (None or empty: size() equal blocks).")
      .def("barrier", &calls::barrier, py::arg("async_op"), Gil())
      .def("send", &calls::send, Gil())
      .def("recv", &calls::recv, Gil())
      .def("recv_any", &calls::recv_any, Gil())
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
  bindings::bind_fast_calls(m);
  bindings::bind_fast_view(m);
}
