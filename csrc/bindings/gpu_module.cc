// Part of pscore._C: where the GPU libraries are loaded from (pscore/cuda_libraries.py sets the
// candidates) and what loaded. Nothing here loads a library at import.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/gil.h"
#include "bindings/modules.h"
#include "gpu/cuda_runtime.h"
#include "gpu/staging.h"

namespace py = pybind11;

namespace pscore::bindings {

void bind_gpu(py::module_& m) {
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
}

}  // namespace pscore::bindings
