// pscore._hogwild: shared-memory Hogwild tables and their update kernels. Arrays cross as
// pscore.buffer.BufferView (table.py and cuda.py make them); dtypes and shapes are checked here
// against the table, and the kernels run without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings/buffer_view_caster.h"
#include "bindings/errors.h"
#include "bindings/gil.h"
#include "common/dtype.h"
#include "hogwild/cuda/cuda_updates.h"
#include "hogwild/kernels.h"
#include "hogwild/shared_table.h"

namespace py = pybind11;
namespace hw = pscore::hogwild;
using pscore::DType;

namespace {

using Release = pscore::bindings::ReleaseGil;

hw::SegmentOptions segment_options(int64_t wait_ms, int64_t ready_timeout_ms, bool populate,
                                   int64_t lock_timeout_ms) {
  hw::SegmentOptions o;
  o.wait_ms = wait_ms;
  o.ready_timeout_ms = ready_timeout_ms;
  o.populate = populate;
  o.lock_timeout_ms = lock_timeout_ms;
  return o;
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

// ---- updates: ids and grads cross as pscore.buffer.BufferView (table.py makes them) ---------

std::vector<uint64_t> dims(const pscore::BufferView& b) {
  return std::vector<uint64_t>(b.shape.begin(), b.shape.end());
}

// Checks ids (none: dense) and grads against the table as table.py documents, then fills a batch.
hw::UpdateBatch batch(const hw::SharedTable& t, const char* op,
                      const std::optional<pscore::BufferView>& ids, const pscore::BufferView& g,
                      bool locked) {
  const std::string where = std::string(op) + " on shared table '" + t.name() + "'";
  if (t.closed()) throw py::value_error(where + ": the table is closed");
  if (g.dtype != t.dtype()) {
    throw py::type_error(where + ": grads are " + pscore::dtype_name(g.dtype) +
                         " but the table holds " + pscore::dtype_name(t.dtype()));
  }
  const std::vector<uint64_t> shape = t.shape();
  hw::UpdateBatch b;
  b.grads = g.host_data("grads");
  b.grads_numel = g.numel;
  b.grads_dtype = g.dtype;
  b.locked = locked;
  if (!ids) {
    if (dims(g) != shape) {
      throw py::value_error(where + ": dense grads have shape " + hw::shape_string(dims(g)) +
                            ", the table " + hw::shape_string(shape));
    }
    b.dense = true;
    return b;
  }
  const std::string ids_what = std::string(op) + " ids";
  if (ids->dtype != DType::kInt32 && ids->dtype != DType::kInt64) {
    throw py::type_error(ids_what + " are " + pscore::dtype_name(ids->dtype) +
                         "; pass int64 or int32");
  }
  if (ids->shape.size() != 1) {
    throw py::value_error(ids_what + " must be 1-D, got shape " + hw::shape_string(dims(*ids)));
  }
  std::vector<uint64_t> want = shape;
  want[0] = static_cast<uint64_t>(ids->shape[0]);
  if (dims(g) != want) {
    throw py::value_error(where + ": grads have shape " + hw::shape_string(dims(g)) + "; " +
                          std::to_string(want[0]) + " ids need " + hw::shape_string(want));
  }
  b.ids = ids->host_data(ids_what.c_str());
  b.num_ids = want[0];
  b.ids_dtype = ids->dtype;
  return b;
}

constexpr const char* kHostOnly =
    "SharedTable takes CPU tensors (pscore.hogwild.cuda updates GPU tables)";

// ids (None: dense) and grads as the caller passed them, viewed read-only.
hw::UpdateBatch batch_of(const hw::SharedTable& t, const char* op, const py::handle& ids,
                         const py::handle& grads, bool locked) {
  const pscore::BufferView g = pscore::bindings::to_view(grads, "grads", false, kHostOnly);
  if (ids.is_none()) return batch(t, op, std::nullopt, g, locked);
  const std::string ids_what = std::string(op) + " ids";
  return batch(t, op, pscore::bindings::to_view(ids, ids_what.c_str(), false, kHostOnly), g,
               locked);
}

// One update from Python: validation with the GIL, the kernel without it.
template <typename Options>
void update(hw::SharedTable& t, const char* op, const py::handle& ids, const py::handle& grads,
            bool locked, bool coalesce, const Options& o,
            void (hw::SharedTable::*apply)(const hw::UpdateBatch&, const Options&)) {
  hw::UpdateBatch b = batch_of(t, op, ids, grads, locked);
  b.coalesce = coalesce;
  pscore::bindings::GilRelease release;
  (t.*apply)(b, o);
}

// The optimizers' options cross as typed structs, keyword-constructed with torch's names and
// defaults; check() raises ValueError as an update with them would.
void bind_options(py::module_& m) {
  py::class_<hw::SgdOptions>(m, "SgdOptions")
      .def(py::init([](double lr, double momentum, double dampening, bool nesterov,
                       double weight_decay, bool maximize) {
             return hw::SgdOptions{lr, momentum, dampening, nesterov, weight_decay, maximize};
           }),
           py::arg("lr") = 0.01, py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("nesterov") = false, py::arg("weight_decay") = 0.0, py::arg("maximize") = false)
      .def("check", [](const hw::SgdOptions& o) { hw::check_options(o, "SGD"); })
      .def_readonly("lr", &hw::SgdOptions::lr)
      .def_readonly("momentum", &hw::SgdOptions::momentum);
  py::class_<hw::AdagradOptions>(m, "AdagradOptions")
      .def(py::init([](double lr, double eps, double lr_decay, double weight_decay, bool maximize,
                       uint64_t step) {
             return hw::AdagradOptions{lr, eps, lr_decay, weight_decay, maximize, step};
           }),
           py::arg("lr") = 0.01, py::arg("eps") = 1e-10, py::arg("lr_decay") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("maximize") = false, py::arg("step") = 0)
      .def("check", [](const hw::AdagradOptions& o) { hw::check_options(o, "Adagrad"); })
      .def_readonly("lr", &hw::AdagradOptions::lr);
  py::class_<hw::AdamOptions>(m, "AdamOptions")
      .def(py::init([](double lr, double beta1, double beta2, double eps, uint64_t step,
                       double weight_decay, bool decoupled_weight_decay, bool amsgrad,
                       bool maximize) {
             hw::AdamOptions o;
             o.lr = lr;
             o.beta1 = beta1;
             o.beta2 = beta2;
             o.eps = eps;
             o.step = step;
             o.weight_decay = weight_decay;
             o.decoupled_weight_decay = decoupled_weight_decay;
             o.amsgrad = amsgrad;
             o.maximize = maximize;
             return o;
           }),
           py::arg("lr") = 1e-3, py::arg("beta1") = 0.9, py::arg("beta2") = 0.999,
           py::arg("eps") = 1e-8, py::arg("step") = 0, py::arg("weight_decay") = 0.0,
           py::arg("decoupled_weight_decay") = false, py::arg("amsgrad") = false,
           py::arg("maximize") = false)
      .def("check", [](const hw::AdamOptions& o) { hw::check_options(o, "Adam"); })
      .def_readonly("lr", &hw::AdamOptions::lr)
      .def_readonly("amsgrad", &hw::AdamOptions::amsgrad);
}

void bind_table(py::module_& m) {
  py::class_<hw::SharedTable, std::shared_ptr<hw::SharedTable>> t(m, "Table");
  t.def_static(
       "create",
       [](const std::string& name, const std::vector<uint64_t>& shape, int dtype_code,
          int optimizer_code, uint32_t lock_stripes, const std::optional<pscore::BufferView>& init,
          double initial_accumulator, bool populate, int64_t lock_timeout_ms) {
         hw::TableSpec spec;
         spec.shape = shape;
         spec.dtype = pscore::dtype_from_code(dtype_code);
         spec.optimizer = hw::optimizer_from_code(static_cast<uint32_t>(optimizer_code));
         spec.lock_stripes = lock_stripes;
         hw::CreateOptions o;
         o.segment = segment_options(0, 0, populate, lock_timeout_ms);
         if (init) {
           o.init = init->host_data("init");
           o.init_nbytes = init->nbytes;
         }
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
      .def("sgd",
           [](hw::SharedTable& t, const py::handle& ids, const py::handle& grads, bool locked,
              bool coalesce, const hw::SgdOptions& o) {
             update(t, "sgd", ids, grads, locked, coalesce, o, &hw::SharedTable::sgd);
           })
      .def("adagrad",
           [](hw::SharedTable& t, const py::handle& ids, const py::handle& grads, bool locked,
              bool coalesce, const hw::AdagradOptions& o) {
             update(t, "adagrad", ids, grads, locked, coalesce, o, &hw::SharedTable::adagrad);
           })
      .def("adam",
           [](hw::SharedTable& t, const py::handle& ids, const py::handle& grads, bool locked,
              bool coalesce, const hw::AdamOptions& o) {
             update(t, "adam", ids, grads, locked, coalesce, o, &hw::SharedTable::adam);
           })
      .def("axpy",
           [](hw::SharedTable& t, double alpha, const py::handle& x, bool locked) {
             hw::UpdateBatch b = batch_of(t, "axpy", py::none(), x, locked);
             pscore::bindings::GilRelease release;
             t.axpy(alpha, b.grads, b.grads_numel, b.grads_dtype, b.locked);
           })
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
      .def_property_readonly("step", &hw::SharedTable::step);
}

void bind_cuda(py::module_& m) {
  m.def("cuda_built", &hw::cuda::built);
  m.def("cuda_device_count", &hw::cuda::device_count, Release());
  m.def("cuda_peak_memory_bandwidth", &hw::cuda::peak_memory_bandwidth, Release());
  m.def(
      "cuda_sparse_update",
      [](int kind, const pscore::BufferView& table, const std::optional<pscore::BufferView>& state0,
         const std::optional<pscore::BufferView>& state1, const pscore::BufferView& ids,
         const pscore::BufferView& grads, std::vector<double> coeffs) {
        const int device = table.device_index;
        auto state = [&](const std::optional<pscore::BufferView>& s, const char* what) {
          return s ? static_cast<float*>(s->cuda_data(what, device)) : nullptr;
        };
        hw::cuda::SparseUpdate u;
        u.kind = static_cast<pscore::OptimizerKind>(kind);
        u.table = static_cast<float*>(table.cuda_data("table"));
        u.state0 = state(state0, "state0");
        u.state1 = state(state1, "state1");
        u.rows = table.shape.empty() ? 0 : static_cast<uint64_t>(table.shape[0]);
        u.dim = u.rows ? table.numel / u.rows : 0;
        u.ids = ids.cuda_data("ids", device);
        u.num_ids = ids.numel;
        u.ids_dtype = ids.dtype;
        u.grads = static_cast<const float*>(grads.cuda_data("grads", device));
        u.stream = reinterpret_cast<void*>(table.stream);
        u.coeffs = std::move(coeffs);
        hw::cuda::sparse_update(u);
      },
      Release());
}

}  // namespace

PYBIND11_MODULE(_hogwild, m) {
  m.doc() = "pscore Hogwild: shared-memory tables with lock-free update kernels";
  pscore::bindings::register_error_translator();
  register_segment_errors();
  bind_options(m);
  bind_table(m);
  bind_cuda(m);
  m.def("kernel_isa", [] { return hw::kernel_isa_name(hw::kernel_isa()); });
  m.def("kernel_isas", [] {
    std::vector<std::string> out;
    for (auto isa : {hw::KernelIsa::kBaseline, hw::KernelIsa::kAvx2}) {
      if (hw::kernel_isa_supported(isa)) out.push_back(hw::kernel_isa_name(isa));
    }
    return out;
  });
  m.def("set_kernel_isa", [](const std::string& name) {
    if (name != "baseline" && name != "avx2") {
      throw std::invalid_argument("kernel set '" + name + "' is not one of baseline, avx2");
    }
    hw::set_kernel_isa(name == "avx2" ? hw::KernelIsa::kAvx2 : hw::KernelIsa::kBaseline);
  });
  m.attr("MAX_ATTACHMENTS") = hw::kMaxAttachments;
  m.attr("DEFAULT_LOCK_STRIPES") = hw::kDefaultLockStripes;
}
