// TCPStore: the Store clients use over TCP; the master instance also runs the server
// (tcp_store_server.h) in a background thread. torch.distributed.TCPStore's constructor.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "store/store.h"
#include "store/tcp_store_client.h"
#include "store/tcp_store_server.h"

namespace pscore {

struct TCPStoreOptions {
  std::string host = "127.0.0.1";  // the master's address (a name or an IP)
  int port = 0;                    // 0 only on the master: picks a free port, see port()
  bool is_master = false;
  int64_t world_size = -1;        // instances that will join, master included; < 0: unknown
  bool wait_for_workers = false;  // master: block in the constructor until world_size joined
  int64_t timeout_ms = 30000;
  // Master only: address to bind. Unset: `host` when it is a loopback address, otherwise every
  // interface (the master's name may resolve to an address not on a local interface, e.g. a
  // Kubernetes service).
  std::optional<std::string> bind_host;
  // Shared secret every connection proves it knows (store_handshake.h); "" = no authentication.
  std::string auth_token;
  // Master only: serve on an address other hosts can reach without a token.
  bool insecure = false;
  std::string job_id = "pscore";  // bound into the handshake; clients of another job are refused
};

class TCPStore : public Store {
 public:
  // Master: binds (NetworkError naming host:port when busy; std::invalid_argument when the bind
  // is reachable from other hosts with no token and not `insecure`) and serves. Everyone:
  // connects, retrying until timeout_ms while the master is not up yet (TimeoutError after),
  // and authenticates (NetworkError when the tokens differ or only one side has one).
  explicit TCPStore(const TCPStoreOptions& options);
  ~TCPStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t amount) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, int64_t timeout_ms) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  bool is_master() const { return server_ != nullptr; }
  // Connections the server dropped for protocol violations (0 on non-masters).
  int64_t dropped_connections() const { return server_ ? server_->dropped_connections() : 0; }
  // Connections the server refused in the handshake (0 on non-masters).
  int64_t auth_failures() const { return server_ ? server_->auth_failures() : 0; }
  bool authenticated() const { return authenticated_; }

 private:
  // server_wait_ms: how long the server may park a get/wait (< 0: forever); unset for ops the
  // server answers at once.
  StoreResponse call(store_wire::Op op, const std::string& payload, const std::string& what,
                     std::optional<int64_t> server_wait_ms = std::nullopt);
  void join_workers(const TCPStoreOptions& options);

  std::string host_;
  int port_;
  bool authenticated_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStoreClient> client_;
};

}  // namespace pscore
