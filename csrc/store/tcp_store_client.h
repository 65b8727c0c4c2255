// The TCP store client: a small pool of connections to the server, one request in flight per
// connection, so threads sharing a store never wait behind each other's blocking get/wait.
// Every connection it opens starts with the handshake of store_handshake.h.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/socket.h"
#include "store/store_handshake.h"
#include "store/store_protocol.h"

namespace pscore {

struct StoreResponse {
  store_wire::Status status = store_wire::Status::kOk;
  std::string payload;
};

class TcpStoreClient {
 public:
  TcpStoreClient(std::string host, int port, StoreAuthOptions auth = {});

  // Opens one connection now, retrying while the server is not up yet, until the deadline.
  // Throws NetworkError "authentication with store at host:port failed" when the handshake is
  // refused or the server cannot prove it has this client's token.
  void connect(const Deadline& deadline);
  // Sends one request (opening a connection first if none is idle, retrying until
  // connect_deadline) and waits for its response until reply_deadline. Returns kOk and kTimeout
  // responses; throws std::invalid_argument (kInvalid), StoreError (kError), TimeoutError when
  // no answer came in time and NetworkError when the connection broke. `what` names the call.
  StoreResponse call(store_wire::Op op, const std::string& payload,
                     const Deadline& connect_deadline, const Deadline& reply_deadline,
                     const std::string& what);

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // "TCPStore(host:port)", the prefix of every message.
  const std::string& name() const { return name_; }

 private:
  Socket acquire(const Deadline& deadline);
  void release(Socket socket);
  void handshake(const Socket& s, const Deadline& deadline);
  // Sends one handshake frame and returns the kOk reply's payload.
  std::string exchange(const Socket& s, store_wire::Op op, const std::string& payload,
                       const Deadline& deadline);
  NetworkError auth_error(const std::string& detail) const;

  std::string host_;
  int port_;
  std::string name_;
  StoreAuthOptions auth_;
  std::atomic<uint64_t> next_seq_{1};
  std::mutex mutex_;
  std::vector<Socket> idle_;
};

}  // namespace pscore
