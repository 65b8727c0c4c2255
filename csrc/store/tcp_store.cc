#include "store/tcp_store.h"

#include "common/error.h"
#include "common/socket.h"
#include "store/store_errors.h"

namespace pscore {

using store_wire::Op;
using store_wire::Status;

namespace {

// A parked get/wait is answered by the server at its deadline; the client allows this much
// more before it decides the server itself is gone.
constexpr int64_t kReplyGraceMs = 2000;

// Keys and values are capped at the store's payload cap; a longer one is a bad argument.
constexpr uint64_t kCap = store_wire::kMaxPayloadBytes;
constexpr const char* kKey = "store: key";
constexpr const char* kValue = "store: value";

const std::string kWorkersKey = std::string(1, kInternalKeyPrefix) + "pscore/tcpstore/workers";
const std::string kReadyKey = std::string(1, kInternalKeyPrefix) + "pscore/tcpstore/ready";

std::string choose_bind_host(const TCPStoreOptions& o) {
  if (o.bind_host) return *o.bind_host;
  return is_loopback_host(o.host) ? o.host : std::string();
}

}  // namespace

TCPStore::TCPStore(const TCPStoreOptions& options)
    : Store(options.timeout_ms),
      host_(options.host),
      port_(options.port),
      authenticated_(!options.auth_token.empty()) {
  if (options.port < 0 || options.port > 65535)
    throw std::invalid_argument("TCPStore: port " + std::to_string(options.port) +
                                " is out of range 0..65535");
  if (!options.is_master && options.port == 0)
    throw std::invalid_argument("TCPStore: a client needs the master's port (got 0)");
  std::string connect_host = host_;
  StoreAuthOptions auth{options.auth_token, options.job_id};
  if (options.is_master) {
    TcpStoreServerOptions so;
    so.host = choose_bind_host(options);
    so.port = options.port;
    so.auth = auth;
    so.insecure = options.insecure;
    server_ = std::make_unique<TcpStoreServer>(so);
    port_ = server_->port();
    if (so.host.empty() || so.host == "0.0.0.0" || so.host == "::")
      connect_host = "127.0.0.1";
    else
      connect_host = so.host;
  }
  client_ = std::make_unique<TcpStoreClient>(connect_host, port_, auth);
  client_->connect(store_deadline(options.timeout_ms));
  if (options.world_size > 0) join_workers(options);
}

TCPStore::~TCPStore() {
  client_.reset();
  server_.reset();
}

void TCPStore::join_workers(const TCPStoreOptions& options) {
  if (add(kWorkersKey, 1) == options.world_size) set(kReadyKey, "1");
  if (!options.is_master || !options.wait_for_workers) return;
  try {
    wait({kReadyKey}, options.timeout_ms);
  } catch (const TimeoutError&) {
    throw TimeoutError(client_->name() + ": only " + std::to_string(add(kWorkersKey, 0)) + " of " +
                       std::to_string(options.world_size) + " workers joined within " +
                       std::to_string(options.timeout_ms) + " ms");
  }
}

StoreResponse TCPStore::call(Op op, const std::string& payload, const std::string& what,
                             std::optional<int64_t> server_wait_ms) {
  Deadline connect_deadline = store_deadline(timeout_ms());
  int64_t reply_ms = timeout_ms();
  if (server_wait_ms)
    reply_ms = store_deadline(*server_wait_ms).infinite() ? -1 : *server_wait_ms + kReplyGraceMs;
  Deadline reply_deadline = store_deadline(reply_ms);
  return client_->call(op, payload, connect_deadline, reply_deadline, what);
}

void TCPStore::set(const std::string& key, const std::string& value) {
  call(Op::kSet, WireWriter<>().string(key, kKey, kCap).string(value, kValue, kCap).take(),
       "set('" + printable_key(key) + "')");
}

std::string TCPStore::get(const std::string& key) {
  int64_t timeout = timeout_ms();
  StoreResponse r = call(Op::kGet, WireWriter<>().string(key, kKey, kCap).i64(timeout).take(),
                         "get('" + printable_key(key) + "')", timeout);
  if (r.status == Status::kTimeout)
    throw TimeoutError(get_timeout_message(client_->name(), key, timeout));
  return std::move(r.payload);
}

int64_t TCPStore::add(const std::string& key, int64_t amount) {
  StoreResponse r = call(Op::kAdd, WireWriter<>().string(key, kKey, kCap).i64(amount).take(),
                         "add('" + printable_key(key) + "')");
  WireReader in(r.payload.data(), r.payload.size(), client_->name());
  return in.i64("add's sum");
}

std::string TCPStore::compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  WireWriter<> w;
  w.string(key, kKey, kCap).string(expected, kValue, kCap).string(desired, kValue, kCap);
  StoreResponse r = call(Op::kCompareSet, w.take(), "compare_set('" + printable_key(key) + "')");
  WireReader in(r.payload.data(), r.payload.size(), client_->name());
  return in.string("compare_set's value");
}

void TCPStore::wait(const std::vector<std::string>& keys, int64_t timeout_ms) {
  WireWriter<> w;
  w.i64(timeout_ms);
  store_wire::write_keys(w, keys);
  StoreResponse r = call(Op::kWait, w.take(), "wait(" + format_keys(keys) + ")", timeout_ms);
  if (r.status == Status::kTimeout) {
    WireReader in(r.payload.data(), r.payload.size(), client_->name());
    throw TimeoutError(wait_timeout_message(client_->name(), timeout_ms,
                                            store_wire::read_keys(in, "missing keys")));
  }
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  WireWriter<> w;
  store_wire::write_keys(w, keys);
  StoreResponse r = call(Op::kCheck, w.take(), "check");
  WireReader in(r.payload.data(), r.payload.size(), client_->name());
  return in.u8("check's answer") != 0;
}

bool TCPStore::delete_key(const std::string& key) {
  StoreResponse r = call(Op::kDelete, WireWriter<>().string(key, kKey, kCap).take(),
                         "delete_key('" + printable_key(key) + "')");
  WireReader in(r.payload.data(), r.payload.size(), client_->name());
  return in.u8("delete_key's answer") != 0;
}

int64_t TCPStore::num_keys() {
  StoreResponse r = call(Op::kNumKeys, "", "num_keys");
  WireReader in(r.payload.data(), r.payload.size(), client_->name());
  return in.i64("num_keys' count");
}

}  // namespace pscore
