// pscore._hogwild: shared-memory Hogwild tables and their update kernels. Updates take numpy arrays
// (table.py turns CPU torch tensors into numpy views, no copy) and read their pointers, dtypes and
// shapes here, which costs far less per call than Python-side checks; the kernels run without the
// GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
      [](int kind, uint64_t table, uint64_t state0, uint64_t state1, uint64_t rows, uint64_t dim,
         uint64_t ids, uint64_t num_ids, int ids_code, uint64_t grads, uint64_t stream,
         std::vector<double> coeffs) {
        hw::cuda::SparseUpdate u;
        u.kind = static_cast<pscore::OptimizerKind>(kind);
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
