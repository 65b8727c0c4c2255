// pscore._hogwild (part of pscore._ext): shared-memory Hogwild tables and their update kernels.
// Arrays cross as pscore.buffer.BufferView (table.py and cuda.py make them); dtypes and shapes are
// checked here against the table, and the kernels run without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings/errors.h"
#include "bindings/gil.h"
#include "bindings/modules.h"
#include "bindings/user_buffer.h"
#include "common/dtype.h"
#include "hogwild/cuda/cuda_updates.h"
#include "hogwild/kernels.h"
#include "hogwild/shared_table.h"

namespace py = pybind11;
namespace hw = pscore::hogwild;
using pscore::DType;

namespace {

using Release = pscore::bindings::ReleaseGil;

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

// The optimizers' options cross as typed structs, keyword-constructed with torch's names; every
// default is the C++ struct's. check() raises ValueError as an update with them would.
void bind_options(py::module_& m) {
  const hw::SgdOptions sgd;
  py::class_<hw::SgdOptions>(m, "SgdOptions")
      .def(py::init([](double lr, double momentum, double dampening, bool nesterov,
                       double weight_decay, bool maximize) {
             return hw::SgdOptions{lr, momentum, dampening, nesterov, weight_decay, maximize};
           }),
           py::arg("lr") = sgd.lr, py::arg("momentum") = sgd.momentum,
           py::arg("dampening") = sgd.dampening, py::arg("nesterov") = sgd.nesterov,
           py::arg("weight_decay") = sgd.weight_decay, py::arg("maximize") = sgd.maximize)
      .def("check", [](const hw::SgdOptions& o) { hw::check_options(o, "SGD"); })
      .def_readwrite("lr", &hw::SgdOptions::lr)
      .def_readwrite("momentum", &hw::SgdOptions::momentum)
      .def_readwrite("dampening", &hw::SgdOptions::dampening)
      .def_readwrite("nesterov", &hw::SgdOptions::nesterov)
      .def_readwrite("weight_decay", &hw::SgdOptions::weight_decay)
      .def_readwrite("maximize", &hw::SgdOptions::maximize);
  const hw::AdagradOptions adagrad;
  py::class_<hw::AdagradOptions>(m, "AdagradOptions")
      .def(py::init([](double lr, double eps, double lr_decay, double weight_decay, bool maximize,
                       uint64_t step) {
             return hw::AdagradOptions{lr, eps, lr_decay, weight_decay, maximize, step};
           }),
           py::arg("lr") = adagrad.lr, py::arg("eps") = adagrad.eps,
           py::arg("lr_decay") = adagrad.lr_decay, py::arg("weight_decay") = adagrad.weight_decay,
           py::arg("maximize") = adagrad.maximize, py::arg("step") = adagrad.step)
      .def("check", [](const hw::AdagradOptions& o) { hw::check_options(o, "Adagrad"); })
      .def_readwrite("lr", &hw::AdagradOptions::lr)
      .def_readwrite("eps", &hw::AdagradOptions::eps)
      .def_readwrite("lr_decay", &hw::AdagradOptions::lr_decay)
      .def_readwrite("weight_decay", &hw::AdagradOptions::weight_decay)
      .def_readwrite("maximize", &hw::AdagradOptions::maximize)
      .def_readwrite("step", &hw::AdagradOptions::step);
  const hw::AdamOptions adam;
  py::class_<hw::AdamOptions>(m, "AdamOptions")
      .def(py::init([](double lr, double beta1, double beta2, double eps, uint64_t step,
                       double weight_decay, bool decoupled_weight_decay, bool amsgrad,
                       bool maximize) {
             return hw::AdamOptions{
                 lr,      beta1,   beta2, eps, step, weight_decay, decoupled_weight_decay,
                 amsgrad, maximize};
           }),
           py::arg("lr") = adam.lr, py::arg("beta1") = adam.beta1, py::arg("beta2") = adam.beta2,
           py::arg("eps") = adam.eps, py::arg("step") = adam.step,
           py::arg("weight_decay") = adam.weight_decay,
           py::arg("decoupled_weight_decay") = adam.decoupled_weight_decay,
           py::arg("amsgrad") = adam.amsgrad, py::arg("maximize") = adam.maximize)
      .def("check", [](const hw::AdamOptions& o) { hw::check_options(o, "Adam"); })
      .def_readwrite("lr", &hw::AdamOptions::lr)
      .def_readwrite("beta1", &hw::AdamOptions::beta1)
      .def_readwrite("beta2", &hw::AdamOptions::beta2)
      .def_readwrite("eps", &hw::AdamOptions::eps)
      .def_readwrite("step", &hw::AdamOptions::step)
      .def_readwrite("weight_decay", &hw::AdamOptions::weight_decay)
      .def_readwrite("decoupled_weight_decay", &hw::AdamOptions::decoupled_weight_decay)
      .def_readwrite("amsgrad", &hw::AdamOptions::amsgrad)
      .def_readwrite("maximize", &hw::AdamOptions::maximize);
}

// What Table.create and Table.attach take: the table's spec and the segment's options, as
// structs with the C++ defaults. The initial values cross as a BufferView argument of create().
void bind_specs(py::module_& m) {
  py::enum_<hw::OptimizerState>(m, "OptimizerState",
                                "The optimizer state a table carries (hogwild/table_spec.h).")
      .value("NONE", hw::OptimizerState::kNone)
      .value("ADAGRAD", hw::OptimizerState::kAdagrad)
      .value("ADAM", hw::OptimizerState::kAdam)
      .value("MOMENTUM", hw::OptimizerState::kMomentum)
      .value("AMSGRAD", hw::OptimizerState::kAmsgrad);
  py::class_<hw::TableSpec>(m, "TableSpec")
      .def(py::init<>())
      .def_readwrite("shape", &hw::TableSpec::shape)
      .def_readwrite("dtype", &hw::TableSpec::dtype)
      .def_readwrite("optimizer", &hw::TableSpec::optimizer)
      .def_readwrite("lock_stripes", &hw::TableSpec::lock_stripes);
  py::class_<hw::SegmentOptions>(m, "SegmentOptions")
      .def(py::init<>())
      .def_readwrite("populate", &hw::SegmentOptions::populate)
      .def_readwrite("wait_ms", &hw::SegmentOptions::wait_ms)
      .def_readwrite("ready_timeout_ms", &hw::SegmentOptions::ready_timeout_ms)
      .def_readwrite("lock_timeout_ms", &hw::SegmentOptions::lock_timeout_ms);
  py::class_<hw::CreateOptions>(m, "CreateOptions")
      .def(py::init<>())
      .def_readwrite("segment", &hw::CreateOptions::segment)
      .def_readwrite("initial_accumulator", &hw::CreateOptions::initial_accumulator);
}

void bind_table(py::module_& m) {
  py::class_<hw::SharedTable, std::shared_ptr<hw::SharedTable>> t(m, "Table");
  t.def_static(
       "create",
       [](const std::string& name, const hw::TableSpec& spec, hw::CreateOptions options,
          const std::optional<pscore::BufferView>& init) {
         if (init) {
           options.init = init->host_data("init");
           options.init_nbytes = init->nbytes;
         }
         return hw::SharedTable::create(name, spec, options);
       },
       py::arg("name"), py::arg("spec"), py::arg("options"), py::arg("init") = py::none(),
       Release())
      .def_static("attach", &hw::SharedTable::attach, py::arg("name"), py::arg("options"),
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
      .def_property_readonly("dtype", &hw::SharedTable::dtype)
      .def_property_readonly("optimizer", &hw::SharedTable::optimizer)
      .def_property_readonly("rows", &hw::SharedTable::rows)
      .def_property_readonly("dim", &hw::SharedTable::dim)
      .def_property_readonly("lock_stripes", &hw::SharedTable::lock_stripes)
      .def_property_readonly("is_creator", &hw::SharedTable::is_creator)
      .def_property_readonly("update_count", &hw::SharedTable::update_count)
      .def_property_readonly("step", &hw::SharedTable::step);
}

// The device addresses of one GPU sparse batch, read from the views (all on the table's device;
// the states are the optimizer's, null when it has none).
hw::cuda::SparseUpdate device_request(const pscore::BufferView& table,
                                      const pscore::BufferView* state0,
                                      const pscore::BufferView* state1,
                                      const pscore::BufferView& ids,
                                      const pscore::BufferView& grads) {
  const int device = table.device_index;
  auto state = [&](const pscore::BufferView* s, const char* what) {
    return s ? static_cast<float*>(s->cuda_data(what, device)) : nullptr;
  };
  hw::cuda::SparseUpdate u;
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
  return u;
}

void bind_cuda(py::module_& m) {
  m.def("cuda_built", &hw::cuda::built);
  m.def("cuda_device_count", &hw::cuda::device_count, Release());
  m.def("cuda_peak_memory_bandwidth", &hw::cuda::peak_memory_bandwidth, Release());
  // One sparse batch each (hogwild/cuda/cuda_updates.h): every array is a CUDA BufferView on the
  // table's device, and the kernels run on the table view's stream.
  m.def(
      "cuda_sgd",
      [](const pscore::BufferView& table, const pscore::BufferView& ids,
         const pscore::BufferView& grads, const hw::SgdOptions& options) {
        hw::cuda::SparseUpdate u = device_request(table, nullptr, nullptr, ids, grads);
        u.kind = pscore::OptimizerKind::kSgd;
        u.sgd = options;
        hw::cuda::sparse_update(u);
      },
      py::arg("table"), py::arg("ids"), py::arg("grads"), py::arg("options"), Release());
  m.def(
      "cuda_adagrad",
      [](const pscore::BufferView& table, const pscore::BufferView& state_sum,
         const pscore::BufferView& ids, const pscore::BufferView& grads,
         const hw::AdagradOptions& options) {
        hw::cuda::SparseUpdate u = device_request(table, &state_sum, nullptr, ids, grads);
        u.kind = pscore::OptimizerKind::kAdagrad;
        u.adagrad = options;
        hw::cuda::sparse_update(u);
      },
      py::arg("table"), py::arg("state_sum"), py::arg("ids"), py::arg("grads"), py::arg("options"),
      Release());
  m.def(
      "cuda_adam",
      [](const pscore::BufferView& table, const pscore::BufferView& exp_avg,
         const pscore::BufferView& exp_avg_sq, const pscore::BufferView& ids,
         const pscore::BufferView& grads, const hw::AdamOptions& options) {
        hw::cuda::SparseUpdate u = device_request(table, &exp_avg, &exp_avg_sq, ids, grads);
        u.kind = pscore::OptimizerKind::kAdam;
        u.adam = options;
        hw::cuda::sparse_update(u);
      },
      py::arg("table"), py::arg("exp_avg"), py::arg("exp_avg_sq"), py::arg("ids"), py::arg("grads"),
      py::arg("options"), Release());
}

}  // namespace

void pscore::bindings::init_hogwild(py::module_& m) {
  m.doc() = "pscore Hogwild: shared-memory tables with lock-free update kernels";
  register_segment_errors();
  bind_options(m);
  bind_specs(m);
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
