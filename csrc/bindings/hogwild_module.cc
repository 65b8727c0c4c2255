// pscore._hogwild: shared-memory Hogwild tables and their update kernels. Buffers cross as plain
// (pointer, count, dtype code) integers taken by pscore/tensor.py; every update releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings/errors.h"
#include "common/dtype.h"
#include "hogwild/cuda/cuda_updates.h"
#include "hogwild/shared_table.h"

namespace py = pybind11;
namespace hw = pscore::hogwild;
using pscore::DType;

namespace {

using Release = py::call_guard<py::gil_scoped_release>;

hw::SegmentOptions segment_options(int64_t wait_ms, int64_t ready_timeout_ms, bool populate,
                                   int64_t lock_timeout_ms) {
  hw::SegmentOptions o;
  o.wait_ms = wait_ms;
  o.ready_timeout_ms = ready_timeout_ms;
  o.populate = populate;
  o.lock_timeout_ms = lock_timeout_ms;
  return o;
}

hw::UpdateBatch make_batch(bool dense, uint64_t ids_ptr, uint64_t num_ids, int ids_code,
                           uint64_t grads_ptr, uint64_t grads_numel, int grads_code, bool locked) {
  hw::UpdateBatch b;
  b.dense = dense;
  b.ids = reinterpret_cast<const void*>(ids_ptr);
  b.num_ids = num_ids;
  b.ids_dtype = pscore::dtype_from_code(ids_code);
  b.grads = reinterpret_cast<const void*>(grads_ptr);
  b.grads_numel = grads_numel;
  b.grads_dtype = pscore::dtype_from_code(grads_code);
  b.locked = locked;
  return b;
}

// A numpy array over one array of the segment; it keeps the table (and so the mapping) alive.
py::array view(const std::shared_ptr<hw::SharedTable>& t, int slot) {
  const char* fmt = t->dtype() == DType::kFloat32 ? "float32" : "float64";
  std::vector<py::ssize_t> shape;
  for (uint64_t d : t->shape()) shape.push_back(static_cast<py::ssize_t>(d));
  auto* keep = new std::shared_ptr<hw::SharedTable>(t);
  py::capsule owner(keep,
                    [](void* p) { delete static_cast<std::shared_ptr<hw::SharedTable>*>(p); });
  return py::array(py::dtype(fmt), shape, t->array(slot), owner);
}

void register_segment_errors() {
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hw::SegmentExists& e) {
      PyErr_SetString(PyExc_FileExistsError, e.what());
    } catch (const hw::SegmentMissing& e) {
      PyErr_SetString(PyExc_FileNotFoundError, e.what());
    }
  });
}

void bind_table(py::module_& m) {
  py::class_<hw::SharedTable, std::shared_ptr<hw::SharedTable>> t(m, "Table");
  t.def_static(
       "create",
       [](const std::string& name, const std::vector<uint64_t>& shape, int dtype_code,
          int optimizer_code, uint32_t lock_stripes, uint64_t init_ptr, uint64_t init_nbytes,
          double initial_accumulator, bool populate, int64_t lock_timeout_ms) {
         hw::TableSpec spec;
         spec.shape = shape;
         spec.dtype = pscore::dtype_from_code(dtype_code);
         spec.optimizer = hw::optimizer_from_code(static_cast<uint32_t>(optimizer_code));
         spec.lock_stripes = lock_stripes;
         hw::CreateOptions o;
         o.segment = segment_options(0, 0, populate, lock_timeout_ms);
         o.init = reinterpret_cast<const void*>(init_ptr);
         o.init_nbytes = init_nbytes;
         o.initial_accumulator = initial_accumulator;
         return hw::SharedTable::create(name, spec, o);
       },
       Release())
      .def_static(
          "attach",
          [](const std::string& name, int64_t wait_ms, int64_t ready_timeout_ms, bool populate,
             int64_t lock_timeout_ms) {
            return hw::SharedTable::attach(
                name, segment_options(wait_ms, ready_timeout_ms, populate, lock_timeout_ms));
          },
          Release())
      .def_static("remove", &hw::Segment::remove, Release())
      .def_static("shm_path", &hw::Segment::shm_path)
      .def(
          "sgd",
          [](hw::SharedTable& self, bool dense, uint64_t ids, uint64_t num_ids, int ids_code,
             uint64_t grads, uint64_t numel, int grads_code, bool locked, double lr) {
            hw::SgdOptions o;
            o.lr = lr;
            self.sgd(make_batch(dense, ids, num_ids, ids_code, grads, numel, grads_code, locked),
                     o);
          },
          Release())
      .def(
          "adagrad",
          [](hw::SharedTable& self, bool dense, uint64_t ids, uint64_t num_ids, int ids_code,
             uint64_t grads, uint64_t numel, int grads_code, bool locked, double lr, double eps) {
            hw::AdagradOptions o;
            o.lr = lr;
            o.eps = eps;
            self.adagrad(
                make_batch(dense, ids, num_ids, ids_code, grads, numel, grads_code, locked), o);
          },
          Release())
      .def(
          "adam",
          [](hw::SharedTable& self, bool dense, uint64_t ids, uint64_t num_ids, int ids_code,
             uint64_t grads, uint64_t numel, int grads_code, bool locked, double lr, double beta1,
             double beta2, double eps, uint64_t step) {
            hw::AdamOptions o;
            o.lr = lr;
            o.beta1 = beta1;
            o.beta2 = beta2;
            o.eps = eps;
            o.step = step;
            self.adam(make_batch(dense, ids, num_ids, ids_code, grads, numel, grads_code, locked),
                      o);
          },
          Release())
      .def(
          "axpy",
          [](hw::SharedTable& self, double alpha, uint64_t x, uint64_t numel, int code,
             bool locked) {
            self.axpy(alpha, reinterpret_cast<const void*>(x), numel, pscore::dtype_from_code(code),
                      locked);
          },
          Release())
      .def("view", &view)
      .def("close", &hw::SharedTable::close, Release())
      .def("unlink", &hw::SharedTable::unlink, Release())
      .def("live_attachments", &hw::SharedTable::live_attachments, Release())
      .def_property_readonly("closed", &hw::SharedTable::closed)
      .def_property_readonly("name", &hw::SharedTable::name)
      .def_property_readonly("shape", &hw::SharedTable::shape)
      .def_property_readonly("dtype_code",
                             [](const hw::SharedTable& s) { return static_cast<int>(s.dtype()); })
      .def_property_readonly(
          "optimizer", [](const hw::SharedTable& s) { return hw::optimizer_name(s.optimizer()); })
      .def_property_readonly("rows", &hw::SharedTable::rows)
      .def_property_readonly("dim", &hw::SharedTable::dim)
      .def_property_readonly("lock_stripes", &hw::SharedTable::lock_stripes)
      .def_property_readonly("is_creator", &hw::SharedTable::is_creator)
      .def_property_readonly("update_count", &hw::SharedTable::update_count)
      .def_property_readonly("adam_step", &hw::SharedTable::adam_step);
}

void bind_cuda(py::module_& m) {
  m.def("cuda_built", &hw::cuda::built);
  m.def("cuda_device_count", &hw::cuda::device_count, Release());
  m.def(
      "cuda_sparse_update",
      [](int kind, uint64_t table, uint64_t state0, uint64_t state1, uint64_t rows, uint64_t dim,
         uint64_t ids, uint64_t num_ids, int ids_code, uint64_t grads, uint64_t stream,
         std::vector<double> coeffs) {
        hw::cuda::SparseUpdate u;
        u.kind = static_cast<hw::cuda::UpdateKind>(kind);
        u.table = reinterpret_cast<float*>(table);
        u.state0 = reinterpret_cast<float*>(state0);
        u.state1 = reinterpret_cast<float*>(state1);
        u.rows = rows;
        u.dim = dim;
        u.ids = reinterpret_cast<const void*>(ids);
        u.num_ids = num_ids;
        u.ids_dtype = pscore::dtype_from_code(ids_code);
        u.grads = reinterpret_cast<const float*>(grads);
        u.stream = reinterpret_cast<void*>(stream);
        u.coeffs = coeffs;
        hw::cuda::sparse_update(u);
      },
      Release());
}

}  // namespace

PYBIND11_MODULE(_hogwild, m) {
  m.doc() = "pscore Hogwild: shared-memory tables with lock-free update kernels";
  pscore::bindings::register_error_translator();
  register_segment_errors();
  bind_table(m);
  bind_cuda(m);
  m.attr("MAX_ATTACHMENTS") = hw::kMaxAttachments;
  m.attr("DEFAULT_LOCK_STRIPES") = hw::kDefaultLockStripes;
}
