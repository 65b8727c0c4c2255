// pscore._store (part of pscore._ext): the C++ stores (HashStore, TCPStore) for
// python/pscore/store.py, which wraps them in the Python Store API. Every call that can block
// releases the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/errors.h"
#include "bindings/gil.h"
#include "bindings/modules.h"
#include "common/auth.h"
#include "store/hash_store.h"
#include "store/store.h"
#include "store/tcp_store.h"

namespace py = pybind11;
using pscore::Store;

namespace {

using Release = pscore::bindings::ReleaseGil;

// Runs fn without the GIL and returns its bytes result as Python bytes.
template <typename Fn>
py::bytes bytes_without_gil(Fn&& fn) {
  std::string out;
  {
    pscore::bindings::GilRelease release;
    out = fn();
  }
  return py::bytes(out);
}

void bind_store(py::module_& m) {
  py::class_<Store, std::shared_ptr<Store>>(m, "Store")
      .def("set", &Store::set, py::arg("key"), py::arg("value"), Release())
      .def(
          "get",
          [](Store& s, const std::string& key) {
            return bytes_without_gil([&] { return s.get(key); });
          },
          py::arg("key"))
      .def("add", &Store::add, py::arg("key"), py::arg("amount"), Release())
      .def(
          "compare_set",
          [](Store& s, const std::string& key, const std::string& expected,
             const std::string& desired) {
            return bytes_without_gil([&] { return s.compare_set(key, expected, desired); });
          },
          py::arg("key"), py::arg("expected"), py::arg("desired"))
      .def("wait", py::overload_cast<const std::vector<std::string>&, int64_t>(&Store::wait),
           py::arg("keys"), py::arg("timeout_ms"), Release())
      .def("check", &Store::check, py::arg("keys"), Release())
      .def("delete_key", &Store::delete_key, py::arg("key"), Release())
      .def("num_keys", &Store::num_keys, Release())
      .def_property("timeout_ms", &Store::timeout_ms, &Store::set_timeout_ms);
}

}  // namespace

void pscore::bindings::init_store(py::module_& m) {
  m.doc() = "pscore's C++ stores; use pscore.store for the Python API";
  bind_store(m);
  // PSCORE_AUTH_TOKEN / PSCORE_AUTH_TOKEN_FILE, for the Python users of a token
  // (pscore._config.auth_token).
  m.def("token_from_env", &pscore::auth::token_from_env);
  m.def("insecure_from_env", &pscore::auth::insecure_from_env);

  py::class_<pscore::HashStore, Store, std::shared_ptr<pscore::HashStore>>(m, "HashStore")
      .def(py::init([](int64_t timeout_ms) {
             pscore::HashStoreOptions o;
             o.timeout_ms = timeout_ms;
             return std::make_shared<pscore::HashStore>(o);
           }),
           py::arg("timeout_ms") = pscore::HashStoreOptions{}.timeout_ms);

  const pscore::TCPStoreOptions tcp;  // the keyword defaults below are the C++ struct's
  py::class_<pscore::TCPStore, Store, std::shared_ptr<pscore::TCPStore>>(m, "TCPStore")
      .def(py::init([](const std::string& host, int port, bool is_master, int64_t world_size,
                       bool wait_for_workers, int64_t timeout_ms,
                       std::optional<std::string> bind_host, std::optional<std::string> auth_token,
                       std::optional<bool> insecure, const std::string& job_id) {
             pscore::TCPStoreOptions o;
             o.host = host;
             o.port = port;
             o.is_master = is_master;
             o.world_size = world_size;
             o.wait_for_workers = wait_for_workers;
             o.timeout_ms = timeout_ms;
             o.bind_host = std::move(bind_host);
             // None: PSCORE_AUTH_TOKEN / PSCORE_AUTH_TOKEN_FILE and PSCORE_INSECURE decide.
             o.auth_token = auth_token ? *auth_token : pscore::auth::token_from_env();
             o.insecure = insecure ? *insecure : pscore::auth::insecure_from_env();
             o.job_id = job_id;
             pscore::bindings::GilRelease release;  // connecting may wait for the master
             return std::make_shared<pscore::TCPStore>(o);
           }),
           py::arg("host"), py::arg("port"), py::arg("is_master") = tcp.is_master,
           py::arg("world_size") = tcp.world_size,
           py::arg("wait_for_workers") = tcp.wait_for_workers,
           py::arg("timeout_ms") = tcp.timeout_ms, py::arg("bind_host") = py::none(),
           py::arg("auth_token") = py::none(), py::arg("insecure") = py::none(),
           py::arg("job_id") = tcp.job_id)
      .def_property_readonly("host", &pscore::TCPStore::host)
      .def_property_readonly("port", &pscore::TCPStore::port)
      .def_property_readonly("is_master", &pscore::TCPStore::is_master)
      .def_property_readonly("dropped_connections", &pscore::TCPStore::dropped_connections)
      .def_property_readonly("auth_failures", &pscore::TCPStore::auth_failures)
      .def_property_readonly("authenticated", &pscore::TCPStore::authenticated);
}
