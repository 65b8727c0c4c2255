// pscore._hogwild (part of pscore._ext): shared-memory Hogwild tables and their update kernels.
// Updates take numpy arrays (table.py turns CPU torch tensors into numpy views, no copy) and read
// their pointers, dtypes and shapes here, which costs far less per call than Python-side checks;
// the kernels run without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings/errors.h"
#include "bindings/gil.h"
#include "bindings/modules.h"
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

// ---- the numpy fast path: pointers, dtypes and shapes read straight from the arrays ---------
// (pscore/hogwild/table.py turns torch tensors and lists into numpy views first.)

bool np_native_order(const py::array& a) {
  const bool little = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
  return a.dtype().byteorder() != (little ? '>' : '<');
}

std::string np_dtype_name(const py::array& a) {
  std::string name = py::str(a.dtype().attr("name"));
  return np_native_order(a) ? name : name + " (non-native byte order)";
}

// The element type of `a` when it is a native-order float32/float64/int32/int64, else false.
bool np_dtype(const py::array& a, DType* out) {
  if (!np_native_order(a)) return false;
  const char k = a.dtype().kind();
  const auto n = a.itemsize();
  if (k == 'f' && n == 4)
    *out = DType::kFloat32;
  else if (k == 'f' && n == 8)
    *out = DType::kFloat64;
  else if (k == 'i' && n == 4)
    *out = DType::kInt32;
  else if (k == 'i' && n == 8)
    *out = DType::kInt64;
  else
    return false;
  return true;
}

std::string shape_of(const py::array& a) {
  std::vector<uint64_t> s;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s.push_back(static_cast<uint64_t>(a.shape(i)));
  return hw::shape_string(s);
}

py::array as_array(const py::handle& x, const char* what) {
  if (!py::isinstance<py::array>(x)) {
    throw py::type_error(std::string(what) + ": expected a numpy array or a torch tensor, got " +
                         std::string(py::str(py::type::handle_of(x).attr("__name__"))));
  }
  auto a = py::reinterpret_borrow<py::array>(x);
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(what) +
                          " is not contiguous; call .contiguous() or np.ascontiguousarray first");
  }
  return a;
}

// Checks ids (None: dense) and grads against the table as table.py documents, then fills a batch.
hw::UpdateBatch np_batch(const hw::SharedTable& t, const char* op, const py::handle& ids_obj,
                         const py::handle& grads_obj, bool locked) {
  const std::string where = std::string(op) + " on shared table '" + t.name() + "'";
  if (t.closed()) throw py::value_error(where + ": the table is closed");
  py::array g = as_array(grads_obj, "grads");
  DType gt;
  if (!np_dtype(g, &gt) || gt != t.dtype()) {
    throw py::type_error(where + ": grads are " + np_dtype_name(g) + " but the table holds " +
                         pscore::dtype_name(t.dtype()));
  }
  const std::vector<uint64_t> shape = t.shape();
  hw::UpdateBatch b;
  b.grads = g.data();
  b.grads_numel = static_cast<uint64_t>(g.size());
  b.grads_dtype = gt;
  b.locked = locked;
  if (ids_obj.is_none()) {
    bool same = g.ndim() == static_cast<py::ssize_t>(shape.size());
    for (size_t i = 0; same && i < shape.size(); ++i) same = g.shape(i) == (py::ssize_t)shape[i];
    if (!same) {
      throw py::value_error(where + ": dense grads have shape " + shape_of(g) + ", the table " +
                            hw::shape_string(shape));
    }
    b.dense = true;
    return b;
  }
  const std::string ids_what = std::string(op) + " ids";
  py::array ids = as_array(ids_obj, ids_what.c_str());
  DType it;
  if (!np_dtype(ids, &it) || (it != DType::kInt32 && it != DType::kInt64)) {
    throw py::type_error(ids_what + " are " + np_dtype_name(ids) + "; pass int64 or int32");
  }
  if (ids.ndim() != 1) {
    throw py::value_error(ids_what + " must be 1-D, got shape " + shape_of(ids));
  }
  std::vector<uint64_t> want = shape;
  want[0] = static_cast<uint64_t>(ids.shape(0));
  bool same = g.ndim() == static_cast<py::ssize_t>(want.size());
  for (size_t i = 0; same && i < want.size(); ++i) same = g.shape(i) == (py::ssize_t)want[i];
  if (!same) {
    throw py::value_error(where + ": grads have shape " + shape_of(g) + "; " +
                          std::to_string(want[0]) + " ids need " + hw::shape_string(want));
  }
  b.ids = ids.data();
  b.num_ids = want[0];
  b.ids_dtype = it;
  return b;
}

// One update from Python: validation with the GIL, the kernel without it.
template <typename Options>
void update(hw::SharedTable& t, const char* op, const py::handle& ids, const py::handle& grads,
            bool locked, bool coalesce, const Options& o,
            void (hw::SharedTable::*apply)(const hw::UpdateBatch&, const Options&)) {
  hw::UpdateBatch b = np_batch(t, op, ids, grads, locked);
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
// structs with the C++ defaults. CreateOptions.init is the address of init_nbytes bytes to copy.
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
      .def_property(
          "init", [](const hw::CreateOptions& o) { return reinterpret_cast<uintptr_t>(o.init); },
          [](hw::CreateOptions& o, uintptr_t p) { o.init = reinterpret_cast<const void*>(p); })
      .def_readwrite("init_nbytes", &hw::CreateOptions::init_nbytes)
      .def_readwrite("initial_accumulator", &hw::CreateOptions::initial_accumulator);
}

void bind_table(py::module_& m) {
  py::class_<hw::SharedTable, std::shared_ptr<hw::SharedTable>> t(m, "Table");
  t.def_static("create", &hw::SharedTable::create, py::arg("name"), py::arg("spec"),
               py::arg("options"), Release())
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
             hw::UpdateBatch b = np_batch(t, "axpy", py::none(), x, locked);
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

void bind_cuda(py::module_& m) {
  m.def("cuda_built", &hw::cuda::built);
  m.def("cuda_device_count", &hw::cuda::device_count, Release());
  m.def("cuda_peak_memory_bandwidth", &hw::cuda::peak_memory_bandwidth, Release());
  // One sparse batch (hogwild/cuda/cuda_updates.h); the pointer fields are device addresses.
  using U = hw::cuda::SparseUpdate;
  auto address = [](auto field) {
    return py::cpp_function([field](const U& u) { return reinterpret_cast<uintptr_t>(u.*field); });
  };
  py::class_<U>(m, "CudaSparseUpdate")
      .def(py::init<>())
      .def_readwrite("kind", &U::kind)
      .def_property("table", address(&U::table),
                    [](U& u, uintptr_t p) { u.table = reinterpret_cast<float*>(p); })
      .def_property("state0", address(&U::state0),
                    [](U& u, uintptr_t p) { u.state0 = reinterpret_cast<float*>(p); })
      .def_property("state1", address(&U::state1),
                    [](U& u, uintptr_t p) { u.state1 = reinterpret_cast<float*>(p); })
      .def_readwrite("rows", &U::rows)
      .def_readwrite("dim", &U::dim)
      .def_property("ids", address(&U::ids),
                    [](U& u, uintptr_t p) { u.ids = reinterpret_cast<const void*>(p); })
      .def_readwrite("num_ids", &U::num_ids)
      .def_readwrite("ids_dtype", &U::ids_dtype)
      .def_property("grads", address(&U::grads),
                    [](U& u, uintptr_t p) { u.grads = reinterpret_cast<const float*>(p); })
      .def_property("stream", address(&U::stream),
                    [](U& u, uintptr_t p) { u.stream = reinterpret_cast<void*>(p); })
      .def_readwrite("coeffs", &U::coeffs);
  m.def("cuda_sparse_update", &hw::cuda::sparse_update, py::arg("update"), Release());
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
