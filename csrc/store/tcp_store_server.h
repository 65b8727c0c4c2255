// The TCP store server: one event-loop thread (common/event_loop.h) serving any number of clients.
// Blocking get/wait are parked server-side (woken by the set/add that creates their keys, or by
// their deadline), so nothing polls. A connection that sends garbage, a truncated or oversized
// frame is dropped and the server keeps serving the others. With a token, a connection is served
// only once it has passed the handshake of store_handshake.h.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/auth.h"
#include "common/socket.h"
#include "store/store_handshake.h"
#include "store/store_protocol.h"

namespace pscore {

struct TcpStoreServerOptions {
  std::string host = "127.0.0.1";  // address to bind; "" binds every interface
  int port = 0;                    // 0 picks a free port (see port())
  uint64_t max_payload_bytes = store_wire::kMaxPayloadBytes;
  StoreAuthOptions auth;  // auth.token "" = no authentication
  bool insecure = false;  // allow a bind reachable from other hosts without a token
};

class TcpStoreServer {
 public:
  // Binds and starts the server thread. Throws NetworkError naming host:port when the port is
  // busy or the host does not resolve, std::invalid_argument when the address is reachable from
  // other hosts and there is neither a token nor `insecure` (common/bind_policy.h).
  explicit TcpStoreServer(const TcpStoreServerOptions& options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  // Connections closed because the peer broke the protocol (garbage, bad length, ...).
  int64_t dropped_connections() const { return dropped_.load(); }
  // Connections refused by the handshake (no, wrong or unwanted token; another job).
  int64_t auth_failures() const { return failure_log_->failures(); }
  // Stops the thread and closes every connection; idempotent.
  void stop();

 private:
  class Loop;

  Socket listener_;
  int port_ = 0;
  std::atomic<int64_t> dropped_{0};
  std::unique_ptr<auth::FailureLog> failure_log_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace pscore
