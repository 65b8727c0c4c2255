// pscore._gpu: where the GPU libraries are loaded from (pscore/cuda_libraries.py sets the
// candidates), what loaded, and the NCCL communicator of a process group
// (pscore/collectives/nccl_link.py). Nothing here loads a library at import.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/buffer_view_caster.h"
#include "bindings/gil.h"
#include "bindings/modules.h"
#include "bindings/work.h"
#include "gpu/cuda_runtime.h"
#include "gpu/nccl.h"
#include "gpu/nccl_communicator.h"
#include "gpu/staging.h"

namespace py = pybind11;

namespace pscore::bindings {

namespace {

void bind_libraries(py::module_& m) {
  m.def("set_cuda_runtime_candidates", &gpu::set_cuda_runtime_candidates, py::arg("candidates"),
        "Paths or sonames the CUDA runtime may be loaded from, in order, for its first load.");
  m.def(
      "cuda_runtime_path", [] { return gpu::cuda_runtime().path; }, ReleaseGil(),
      "Loads the CUDA runtime (once) and returns the file it came from; pscore.Error listing "
      "every candidate tried when none loads.");
  m.def(
      "cuda_device_count",
      [] {
        const auto& cuda = gpu::cuda_runtime();
        int count = 0;
        cuda.check(cuda.cudaGetDeviceCount(&count), "cudaGetDeviceCount");
        return count;
      },
      ReleaseGil(), "The CUDA devices the runtime sees (loads it first).");
  m.def("set_staging_chunk_bytes", &gpu::set_staging_chunk_bytes, py::arg("nbytes"),
        "The chunk size of CUDA buffers staged through pinned host memory (gpu/staging.h).");
  m.def("staging_chunk_bytes", &gpu::staging_chunk_bytes);
  m.def("set_nccl_candidates", &gpu::set_nccl_candidates, py::arg("candidates"),
        "Paths or sonames NCCL may be loaded from, in order, for its first load.");
  m.def(
      "nccl_path", [] { return gpu::nccl().path; }, ReleaseGil(),
      "Loads NCCL (once) and returns the file it came from; pscore.Error listing every "
      "candidate tried when none loads, or naming the symbol a library lacks.");
  m.def(
      "nccl_version", [] { return gpu::nccl().version(); }, ReleaseGil(),
      "The loaded NCCL's version, as \"2.21.5\" (loads it first).");
  m.def(
      "nccl_unique_id", [] { return py::bytes(gpu::NcclCommunicator::unique_id()); },
      "A new NCCL unique id (ncclGetUniqueId): the bytes rank 0 hands the others.");
}

void bind_communicator(py::module_& m) {
  using C = gpu::NcclCommunicator;
  using Views = C::Views;
  using Gil = ReleaseGil;
  bind_work<gpu::NcclWork>(m, "NcclWork")
      .def("wait_stream", &gpu::NcclWork::wait_stream, py::arg("stream"), Gil(),
           "Orders `stream` (a cudaStream_t as an integer) after the operation on the GPU, "
           "without blocking; raises the operation's failure when it has failed already.");
  const gpu::NcclOptions defaults;
  py::class_<C, std::shared_ptr<C>>(m, "NcclCommunicator")
      .def(py::init([](int rank, int size, const py::bytes& unique_id, int device,
                       int64_t timeout_ms, const std::string& group, std::vector<int> ranks) {
             gpu::NcclOptions o;
             o.rank = rank;
             o.size = size;
             o.device = device;
             o.timeout_ms = timeout_ms;
             o.group = group;
             o.ranks = std::move(ranks);
             std::string id = unique_id;
             GilRelease unlocked;  // ncclCommInitRank waits for every rank
             return std::make_shared<C>(o, id);
           }),
           py::arg("rank"), py::arg("size"), py::arg("unique_id"), py::arg("device"),
           py::arg("timeout_ms") = defaults.timeout_ms, py::arg("group") = defaults.group,
           py::arg("ranks") = std::vector<int>{},
           "Joins the group's communicator on CUDA device `device` (blocks until all ranks do).")
      .def_property_readonly("rank", &C::rank)
      .def_property_readonly("size", &C::size)
      .def_property_readonly("device", &C::device)
      .def("allreduce", &C::allreduce, py::arg("buffer"), py::arg("op"), Gil())
      .def("broadcast", &C::broadcast, py::arg("buffer"), py::arg("root"), Gil())
      .def("reduce", &C::reduce, py::arg("buffer"), py::arg("op"), py::arg("root"), Gil())
      .def(
          "allgather",
          [](C& c, const BufferView& in, const Views& outs) { return c.allgather(in, outs); },
          py::arg("input"), py::arg("outputs"), Gil())
      .def("reduce_scatter", &C::reduce_scatter, py::arg("inputs"), py::arg("output"),
           py::arg("op"), Gil())
      .def("gather", &C::gather, py::arg("input"), py::arg("outputs"), py::arg("root"), Gil())
      .def("scatter", &C::scatter, py::arg("inputs"), py::arg("output"), py::arg("root"), Gil())
      .def("all_to_all", &C::all_to_all, py::arg("inputs"), py::arg("outputs"), Gil())
      .def("send", &C::send, py::arg("buffer"), py::arg("peer"), Gil())
      .def("recv", &C::recv, py::arg("buffer"), py::arg("peer"), Gil())
      .def("abort", &C::abort, py::arg("reason"), Gil(),
           "Aborts the communicator: outstanding and later operations raise `reason`.")
      .def("destroy", &C::destroy, Gil(),
           "Waits for the outstanding operations (up to the timeout), then destroys it.")
      .def("broken_reason", &C::broken_reason);
}

}  // namespace

void init_gpu(py::module_& m) {
  bind_libraries(m);
  bind_communicator(m);
}

}  // namespace pscore::bindings
