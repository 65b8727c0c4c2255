// pscore._ps (part of pscore._ext): the parameter server (PsServer) and client (PsClient) for
// Python. Arrays cross as pscore.buffer.BufferView (float32 values, int64 ids; host memory, or
// CUDA memory staged through pinned blocks, gpu/staging.h); every call that can block releases
// the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "bindings/buffer_view_caster.h"
#include "bindings/errors.h"
#include "bindings/gil.h"
#include "bindings/modules.h"
#include "bindings/work.h"
#include "gpu/staging.h"
#include "ps/client/ps_client.h"
#include "ps/server/ps_server.h"
#include "ps/server/shard_state.h"

namespace py = pybind11;
using namespace pscore::ps;

namespace {

using pscore::BufferView;
using pscore::DType;
using pscore::gpu::Copy;

// &b, after checking it holds T (float32 values or int64 ids).
template <typename T>
const BufferView* typed(const BufferView& b, const char* what) {
  const DType want =
      std::is_same_v<std::remove_const_t<T>, float> ? DType::kFloat32 : DType::kInt64;
  if (b.dtype != want) {
    throw std::invalid_argument(std::string(what) + " must be " + pscore::dtype_name(want) +
                                ", got " + pscore::dtype_name(b.dtype));
  }
  return &b;
}

// A request on `buffers` (host[i] stands for buffers[i], crossing as copies[i]): from their own
// memory when they are on the host (the Work completes later); when they are on CUDA, through
// pinned blocks (gpu/staging.h), and complete when the call returns, since the copy back to
// the device needs the reply.
template <class Call>
std::shared_ptr<Work> request(PsClient& c, const char* what,
                              const std::vector<const BufferView*>& buffers,
                              const std::vector<Copy>& copies, Call call) {
  const bool cuda = pscore::gpu::on_cuda(buffers, what);
  std::shared_ptr<Work> work;
  pscore::gpu::run_staged(c.staging_pool(), buffers, copies, what, c.options().timeout_ms,
                          [&](const std::vector<void*>& host) {
                            work = call(host);
                            if (cuda) work->wait();
                          });
  return work;
}

const float* values(void* host) { return static_cast<const float*>(host); }
const int64_t* ids(void* host) { return static_cast<const int64_t*>(host); }
float* out(void* host) { return static_cast<float*>(host); }

int64_t count(const BufferView& b) { return static_cast<int64_t>(b.numel); }

using Release = pscore::bindings::ReleaseGil;

// A dense table's parts as Python sees them: (shard, offset, numel) tuples.
std::vector<std::tuple<int32_t, int64_t, int64_t>> part_tuples(const std::vector<DensePart>& ps) {
  std::vector<std::tuple<int32_t, int64_t, int64_t>> out;
  for (const DensePart& p : ps) out.emplace_back(p.shard, p.offset, p.numel);
  return out;
}

// Python names members by string: getattr(_ps.InitKind, "normal".upper()).
void bind_enums(py::module_& m) {
  py::enum_<InitKind>(m, "InitKind", "How a table's values start (csrc/ps/wire/table_spec.h).")
      .value("ZEROS", InitKind::kZeros)
      .value("UNIFORM", InitKind::kUniform)
      .value("NORMAL", InitKind::kNormal)
      .value("CONSTANT", InitKind::kConstant);
  py::enum_<Consistency>(m, "Consistency", "When pushes apply (docs/ps.md): async, sync, ssp.")
      .value("ASYNC", Consistency::kAsync)
      .value("SYNC", Consistency::kSync)
      .value("SSP", Consistency::kSsp);
}

void bind_specs(py::module_& m) {
  py::class_<OptimizerSpec>(m, "OptimizerSpec")
      .def(py::init<>())
      .def_readwrite("kind", &OptimizerSpec::kind)
      .def_readwrite("lr", &OptimizerSpec::lr)
      .def_readwrite("momentum", &OptimizerSpec::momentum)
      .def_readwrite("dampening", &OptimizerSpec::dampening)
      .def_readwrite("weight_decay", &OptimizerSpec::weight_decay)
      .def_readwrite("nesterov", &OptimizerSpec::nesterov)
      .def_readwrite("beta1", &OptimizerSpec::beta1)
      .def_readwrite("beta2", &OptimizerSpec::beta2)
      .def_readwrite("eps", &OptimizerSpec::eps)
      .def_readwrite("amsgrad", &OptimizerSpec::amsgrad)
      .def_readwrite("lr_decay", &OptimizerSpec::lr_decay)
      .def_readwrite("initial_accumulator_value", &OptimizerSpec::initial_accumulator_value)
      .def_readwrite("alpha", &OptimizerSpec::alpha)
      .def_readwrite("centered", &OptimizerSpec::centered)
      .def_readwrite("clip_norm", &OptimizerSpec::clip_norm)
      .def_readwrite("clip_value", &OptimizerSpec::clip_value);
  py::class_<TableSpec>(m, "TableSpec")
      .def(py::init<>())
      .def_readwrite("name", &TableSpec::name)
      .def_property(
          "sparse", [](const TableSpec& s) { return s.kind == TableKind::kSparse; },
          [](TableSpec& s, bool v) { s.kind = v ? TableKind::kSparse : TableKind::kDense; })
      .def_readwrite("shape", &TableSpec::shape)
      .def_readwrite("capacity", &TableSpec::capacity)
      .def_readwrite("max_rows_per_shard", &TableSpec::max_rows_per_shard)
      .def_property(
          "init_kind", [](const TableSpec& s) { return s.init.kind; },
          [](TableSpec& s, InitKind k) { s.init.kind = k; })
      .def_property(
          "init_a", [](const TableSpec& s) { return s.init.a; },
          [](TableSpec& s, double v) { s.init.a = v; })
      .def_property(
          "init_b", [](const TableSpec& s) { return s.init.b; },
          [](TableSpec& s, double v) { s.init.b = v; })
      .def_property(
          "seed", [](const TableSpec& s) { return s.init.seed; },
          [](TableSpec& s, uint64_t v) { s.init.seed = v; })
      .def_readwrite("optimizer", &TableSpec::optimizer)
      .def_property(
          "consistency", [](const TableSpec& s) { return s.consistency.mode; },
          [](TableSpec& s, Consistency v) { s.consistency.mode = v; })
      .def_property(
          "staleness", [](const TableSpec& s) { return s.consistency.staleness; },
          [](TableSpec& s, int v) { s.consistency.staleness = v; })
      .def_property(
          "backup_workers", [](const TableSpec& s) { return s.consistency.backup_workers; },
          [](TableSpec& s, int v) { s.consistency.backup_workers = v; })
      .def("validate", &TableSpec::validate, py::arg("num_workers"))
      .def("settings",
           [](const TableSpec& s) {
             std::vector<std::pair<std::string, std::string>> out;
             for (const TableSetting& t : s.settings()) out.emplace_back(t.key, t.value);
             return out;
           })
      .def("differences", &TableSpec::differences, py::arg("other"));
  py::class_<TableLayout>(m, "TableLayout")
      .def_readonly("id", &TableLayout::id)
      .def_readonly("spec", &TableLayout::spec)
      .def_property_readonly("parts", [](const TableLayout& l) { return part_tuples(l.parts); });
  m.def(
      "plan_dense_parts",
      [](int64_t numel, int64_t elem_bytes, std::vector<int64_t> loads, int64_t min_part_bytes) {
        PartitionOptions o;
        o.min_part_bytes = min_part_bytes;
        auto parts = plan_dense_parts(numel, elem_bytes, loads, o);
        return std::make_pair(part_tuples(parts), loads);
      },
      py::arg("numel"), py::arg("elem_bytes"), py::arg("shard_bytes"),
      py::arg("min_part_bytes") = PartitionOptions{}.min_part_bytes);
  m.def("shard_for_id", &shard_for_id, py::arg("id"), py::arg("num_shards"));
}

void bind_server(py::module_& m) {
  py::class_<SnapshotPolicy>(m, "SnapshotPolicy")
      .def(py::init<>())
      .def_readwrite("every_ms", &SnapshotPolicy::every_ms)
      .def_readwrite("log_min_bytes", &SnapshotPolicy::log_min_bytes)
      .def_readwrite("log_ratio", &SnapshotPolicy::log_ratio)
      .def_readwrite("stop_timeout_ms", &SnapshotPolicy::stop_timeout_ms)
      .def("due_bytes", &SnapshotPolicy::due_bytes, py::arg("snapshot_bytes"));
  py::class_<ServerOptions>(m, "ServerOptions")
      .def(py::init<>())
      .def_readwrite("host", &ServerOptions::host)
      .def_readwrite("port", &ServerOptions::port)
      .def_readwrite("shard", &ServerOptions::shard)
      .def_readwrite("num_shards", &ServerOptions::num_shards)
      .def_readwrite("num_workers", &ServerOptions::num_workers)
      .def_readwrite("auth_token", &ServerOptions::auth_token)
      .def_readwrite("insecure", &ServerOptions::insecure)
      .def_readwrite("job_id", &ServerOptions::job_id)
      .def_readwrite("num_threads", &ServerOptions::num_threads)
      .def_readwrite("inline_max_bytes", &ServerOptions::inline_max_bytes)
      .def_readwrite("max_frame_bytes", &ServerOptions::max_frame_bytes)
      .def_readwrite("max_queued_requests", &ServerOptions::max_queued_requests)
      .def_readwrite("max_queued_bytes", &ServerOptions::max_queued_bytes)
      .def_readwrite("max_outbox_bytes", &ServerOptions::max_outbox_bytes)
      .def_readwrite("max_connections", &ServerOptions::max_connections)
      .def_readwrite("handshake_timeout_ms", &ServerOptions::handshake_timeout_ms)
      .def_readwrite("recover_dir", &ServerOptions::recover_dir)
      .def_readwrite("fsync_log", &ServerOptions::fsync_log)
      .def_readwrite("snapshots", &ServerOptions::snapshots)
      .def_readwrite("min_part_bytes", &ServerOptions::min_part_bytes)
      .def_readwrite("log_connections", &ServerOptions::log_connections)
      .def_readwrite("log_quiet_ms", &ServerOptions::log_quiet_ms);
  // The token and insecure switch every pscore server and client reads (common/auth.h).
  py::class_<PsServer>(m, "Server")
      .def(py::init<const ServerOptions&>())
      .def("start", &PsServer::start, Release())
      .def("stop", &PsServer::stop, py::arg("drain_timeout_ms"), Release())
      .def_property_readonly("port", &PsServer::port)
      .def_property_readonly("running", &PsServer::running)
      .def_property_readonly("incarnation", &PsServer::incarnation)
      .def_property_readonly("replayed_records", &PsServer::replayed_records)
      .def_property_readonly("snapshots_written", &PsServer::snapshots_written)
      .def("stats_json", &PsServer::stats_json, Release())
      .def("tables_status_json", &PsServer::tables_status_json, Release())
      .def(
          "save", [](PsServer& s, const std::string& dir) { s.shard().save(dir); }, Release())
      .def("load", [](PsServer& s, const std::string& dir) { s.load(dir); }, Release());
}

void bind_client(py::module_& m) {
  pscore::bindings::bind_work<Work>(m, "Work")
      .def("failed_shards", &Work::failed_shards)
      .def("pending_shards", &Work::pending_shards)
      .def_property_readonly("retryable", &Work::retryable)
      .def("progress", &Work::progress)
      .def("status_counts", &Work::status_counts)
      .def("replies", [](Work& w) {
        std::vector<py::bytes> out;
        for (const std::string& r : w.replies()) out.emplace_back(r);
        return out;
      });
  py::class_<ClientOptions>(m, "ClientOptions")
      .def(py::init<>())
      .def_readwrite("worker", &ClientOptions::worker)
      .def_readwrite("job_id", &ClientOptions::job_id)
      .def_readwrite("auth_token", &ClientOptions::auth_token)
      .def_readwrite("timeout_ms", &ClientOptions::timeout_ms)
      .def_readwrite("connect_timeout_ms", &ClientOptions::connect_timeout_ms);
  py::class_<PsClient>(m, "Client")
      .def(py::init<const ClientOptions&, int>(), py::arg("options"), py::arg("num_shards"))
      .def_property_readonly("num_shards", &PsClient::num_shards)
      .def("connect", &PsClient::connect, py::arg("shard"), py::arg("host"), py::arg("port"),
           py::arg("timeout_ms") = 0, Release())
      .def("connected", &PsClient::connected)
      .def("link_error", &PsClient::link_error)
      .def("incarnation", &PsClient::incarnation)
      .def(
          "create_table",
          [](PsClient& c, const TableSpec& spec, const std::optional<BufferView>& init) {
            if (!init) return c.create_table(spec, nullptr, 0);
            return c.create_table(
                spec, static_cast<const float*>(typed<float>(*init, "init")->host_data("init")),
                count(*init));
          },
          Release())
      .def("lookup_table", &PsClient::lookup_table, Release())
      .def("list_tables", &PsClient::list_tables, Release())
      .def("drop_table", &PsClient::drop_table, Release())
      .def("table_status", &PsClient::table_status, Release())
      .def(
          "push",
          [](PsClient& c, const std::string& name, const BufferView& g) {
            return request(c, "push", {typed<float>(g, "grad")}, {Copy::kIn},
                           [&](const auto& h) { return c.push(name, values(h[0]), count(g)); });
          },
          Release())
      .def(
          "pull",
          [](PsClient& c, const std::string& name, const BufferView& o) {
            return request(c, "pull", {typed<float>(o, "out")}, {Copy::kOut},
                           [&](const auto& h) { return c.pull(name, out(h[0]), count(o)); });
          },
          Release())
      .def(
          "push_pull",
          [](PsClient& c, const std::string& name, const BufferView& g, const BufferView& o) {
            return request(c, "push_pull", {typed<float>(g, "grad"), typed<float>(o, "out")},
                           {Copy::kIn, Copy::kOut}, [&](const auto& h) {
                             return c.push_pull(name, values(h[0]), out(h[1]), count(g));
                           });
          },
          Release())
      .def(
          "assign",
          [](PsClient& c, const std::string& name, const BufferView& v) {
            return request(c, "assign", {typed<float>(v, "value")}, {Copy::kIn},
                           [&](const auto& h) { return c.assign(name, values(h[0]), count(v)); });
          },
          Release())
      .def(
          "push_sparse",
          [](PsClient& c, const std::string& name, const BufferView& i, const BufferView& g) {
            return request(c, "push_sparse", {typed<int64_t>(i, "ids"), typed<float>(g, "grads")},
                           {Copy::kIn, Copy::kIn}, [&](const auto& h) {
                             return c.push_sparse(name, ids(h[0]), values(h[1]), count(i));
                           });
          },
          Release())
      .def(
          "pull_sparse",
          [](PsClient& c, const std::string& name, const BufferView& i, const BufferView& o) {
            return request(c, "pull_sparse", {typed<int64_t>(i, "ids"), typed<float>(o, "out")},
                           {Copy::kIn, Copy::kOut}, [&](const auto& h) {
                             return c.pull_sparse(name, ids(h[0]), out(h[1]), count(i));
                           });
          },
          Release())
      .def(
          "push_pull_sparse",
          [](PsClient& c, const std::string& name, const BufferView& i, const BufferView& g,
             const BufferView& o) {
            return request(
                c, "push_pull_sparse",
                {typed<int64_t>(i, "ids"), typed<float>(g, "grads"), typed<float>(o, "out")},
                {Copy::kIn, Copy::kIn, Copy::kOut}, [&](const auto& h) {
                  return c.push_pull_sparse(name, ids(h[0]), values(h[1]), out(h[2]), count(i));
                });
          },
          Release())
      .def("worker_done", &PsClient::worker_done, Release())
      .def("global_step", &PsClient::global_step, Release())
      .def("save", &PsClient::save, Release())
      .def("load", &PsClient::load, Release())
      .def("stats", py::overload_cast<>(&PsClient::stats), Release())
      .def("stats", py::overload_cast<int>(&PsClient::stats), py::arg("shard"), Release())
      .def("ping", &PsClient::ping, Release())
      .def_static("combine", &PsClient::combine)
      .def("retry", &PsClient::retry, Release())
      .def("table_step", &PsClient::table_step, Release());
}

}  // namespace

void pscore::bindings::init_ps(py::module_& m) {
  m.doc() = "pscore parameter server: C++ server and client";
  // Registered after the common translator, so tried first.
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const TableNotFound& e) {
      PyErr_SetString(PyExc_KeyError, e.what());
    }
  });
  bind_enums(m);
  bind_specs(m);
  bind_server(m);
  bind_client(m);
}
