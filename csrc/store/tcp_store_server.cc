#include "store/tcp_store_server.h"

#include <sys/socket.h>

#include <unordered_map>
#include <unordered_set>

#include "common/bind_policy.h"
#include "common/error.h"
#include "common/event_loop.h"
#include "store/key_value_table.h"
#include "store/store.h"
#include "store/store_connection.h"

namespace pscore {

using store_wire::Op;
using store_wire::Status;

// The server thread's state, served by an EventLoop. Protocol: a client sends one request frame
// and reads one response frame with the same seq before sending the next (a request sent while
// one is parked drops the connection, so a parked connection never has buffered input). get/wait
// on missing keys park the request: the connection is remembered under each key it waits for and
// gets a timer for its deadline; the set/add/compare_set that completes its keys, or the timer,
// answers it. Frames that arrive before a connection is ready go through its
// StoreServerHandshake first; with a token, a connection that has not authenticated within
// kStoreHandshakeTimeoutMs is closed. A dropped connection is closed at the end of the turn, so
// its descriptor number is not reused while callbacks of that turn may still name it.
class TcpStoreServer::Loop {
 public:
  Loop(Socket* listener, const TcpStoreServerOptions& options, std::atomic<int64_t>* dropped,
       auth::FailureLog* failure_log)
      : events_("TCPStore server"),
        listener_(listener),
        max_payload_(options.max_payload_bytes),
        auth_(options.auth),
        dropped_(dropped),
        failure_log_(failure_log) {
    events_.add(listener_->fd(), EPOLLIN, [this](uint32_t) { accept_all(); });
  }
  void run() { events_.run(); }
  void stop() { events_.stop(); }  // any thread

 private:
  void watch(StoreConnection& c);
  void accept_all();
  void on_event(int fd, uint32_t events);
  void process_frames(StoreConnection& c);
  bool admit(StoreConnection& c, const FrameHeader& h, const std::string& payload);
  void on_hangup(StoreConnection& c);
  void handle(StoreConnection& c, const FrameHeader& h, const std::string& payload);
  void park(StoreConnection& c, Op op, uint64_t seq, std::vector<std::string> keys,
            int64_t timeout_ms);
  void unpark(StoreConnection& c);
  void notify(const std::string& key);
  void expire_wait(int fd);
  void reply(StoreConnection& c, Status status, uint64_t seq, const std::string& payload);
  void drop(StoreConnection& c, bool protocol_violation);

  EventLoop events_;
  Socket* listener_;
  uint64_t max_payload_;
  StoreAuthOptions auth_;
  std::atomic<int64_t>* dropped_;
  auth::FailureLog* failure_log_;
  KeyValueTable table_;
  std::unordered_map<int, std::unique_ptr<StoreConnection>> conns_;
  std::unordered_map<std::string, std::unordered_set<int>> watchers_;
};

// Watches for input always, and for room to write while replies wait to be sent.
void TcpStoreServer::Loop::watch(StoreConnection& c) {
  if (c.closing || c.polling_out == c.wants_write()) return;
  c.polling_out = c.wants_write();
  events_.modify(c.fd(), EPOLLIN | EPOLLRDHUP | (c.polling_out ? EPOLLOUT : 0u));
}

void TcpStoreServer::Loop::accept_all() {
  for (;;) {
    int fd = ::accept4(listener_->fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a transient failure (EMFILE...): retried on next event
    auto conn = std::make_unique<StoreConnection>(Socket(fd), max_payload_);
    if (!auth_.token.empty()) {
      // Unauthenticated peers get small frames and a few seconds, not the store's memory.
      conn->set_max_payload(kMaxHandshakeBytes);
      StoreConnection* c = conn.get();  // the timer is cancelled when c is dropped
      conn->handshake_timer = events_.add_timer(Deadline(kStoreHandshakeTimeoutMs).time_point(),
                                                [this, c] { drop(*c, false); });
    }
    events_.add(fd, EPOLLIN | EPOLLRDHUP, [this, fd](uint32_t events) { on_event(fd, events); });
    conns_.emplace(fd, std::move(conn));
  }
}

void TcpStoreServer::Loop::on_event(int fd, uint32_t events) {
  auto it = conns_.find(fd);
  if (it == conns_.end() || it->second->closing) return;
  StoreConnection& c = *it->second;
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    bool open = c.read_available();
    process_frames(c);
    if (!open) on_hangup(c);
  }
  if (!c.closing && (events & EPOLLOUT) && !c.flush()) drop(c, false);
  watch(c);
}

void TcpStoreServer::Loop::process_frames(StoreConnection& c) {
  FrameHeader h;
  std::string payload;
  try {
    while (!c.closing && !c.parked && c.next_frame(&h, &payload))
      if (admit(c, h, payload)) handle(c, h, payload);
    // A client sends its next request only after the answer to the parked one.
    if (!c.closing && c.parked && c.has_buffered_input())
      throw NetworkError(c.peer() + ": sent a request while its get/wait was pending");
  } catch (const std::exception&) {
    drop(c, true);  // garbage, a truncated field, an unknown op: this client only
  }
}

// Runs the handshake's verdict on a frame; true when the frame is a data op to handle now.
bool TcpStoreServer::Loop::admit(StoreConnection& c, const FrameHeader& h,
                                 const std::string& payload) {
  using Action = StoreServerHandshake::Action;
  if (c.handshake.state() == StoreServerHandshake::State::kReady && h.type <= store_wire::kMaxOp)
    return true;  // the hot path: an established connection
  StoreServerHandshake::Step step = c.handshake.on_frame(auth_, h, payload, c.peer());
  if (step.action == Action::kServe) return true;
  if (step.action == Action::kReply) {
    if (c.handshake.state() == StoreServerHandshake::State::kReady) {
      c.set_max_payload(max_payload_);
      events_.cancel_timer(*c.handshake_timer);
      c.handshake_timer.reset();
    }
    reply(c, Status::kOk, h.seq, step.payload);
    return false;
  }
  if (step.auth_failure) failure_log_->report(c.peer_address(), step.payload);
  reply(c, Status::kAuthFailed, h.seq, WireWriter<>().string(step.payload, "refusal").take());
  drop(c, false);
  return false;
}

// The peer closed its side. One that leaves right after the server's proof has rejected it:
// the tokens differ (or it was probing), which the operator wants to hear about.
void TcpStoreServer::Loop::on_hangup(StoreConnection& c) {
  if (!c.closing && c.handshake.state() == StoreServerHandshake::State::kAwaitingProof)
    failure_log_->report(c.peer_address(),
                         "the client closed the connection after the store's proof (its "
                         "PSCORE_AUTH_TOKEN differs from the store's?)");
  drop(c, false);
}

void TcpStoreServer::Loop::handle(StoreConnection& c, const FrameHeader& h,
                                  const std::string& payload) {
  if (h.type == 0 || h.type > store_wire::kMaxOp)
    throw NetworkError(c.peer() + ": unknown store op " + std::to_string(h.type));
  Op op = static_cast<Op>(h.type);
  WireReader in(payload.data(), payload.size(), c.peer());
  WireWriter<> out;
  switch (op) {
    case Op::kSet: {
      std::string key = in.string("key");
      std::string value = in.string("value");
      in.finish();
      table_.set(key, value);
      notify(key);  // parked waiters first: they are what a rendezvous waits on
      reply(c, Status::kOk, h.seq, "");
      return;
    }
    case Op::kGet: {
      std::string key = in.string("key");
      int64_t timeout_ms = in.i64("timeout_ms");
      in.finish();
      if (const std::string* v = table_.find(key)) return reply(c, Status::kOk, h.seq, *v);
      return park(c, op, h.seq, {key}, timeout_ms);
    }
    case Op::kAdd: {
      std::string key = in.string("key");
      int64_t amount = in.i64("amount");
      in.finish();
      int64_t value;
      try {
        value = table_.add(key, amount);
      } catch (const std::invalid_argument& e) {
        return reply(c, Status::kInvalid, h.seq, out.string(e.what(), "error message").take());
      }
      notify(key);
      reply(c, Status::kOk, h.seq, out.i64(value).take());
      return;
    }
    case Op::kCompareSet: {
      std::string key = in.string("key");
      std::string expected = in.string("expected value");
      std::string desired = in.string("desired value");
      in.finish();
      std::string now = table_.compare_set(key, expected, desired);
      notify(key);
      reply(c, Status::kOk, h.seq, out.string(now, "value").take());
      return;
    }
    case Op::kWait: {
      int64_t timeout_ms = in.i64("timeout_ms");
      std::vector<std::string> keys = store_wire::read_keys(in, "keys");
      in.finish();
      if (table_.missing(keys).empty()) return reply(c, Status::kOk, h.seq, "");
      return park(c, op, h.seq, std::move(keys), timeout_ms);
    }
    case Op::kCheck: {
      std::vector<std::string> keys = store_wire::read_keys(in, "keys");
      in.finish();
      return reply(c, Status::kOk, h.seq, out.u8(table_.missing(keys).empty()).take());
    }
    case Op::kDelete: {
      std::string key = in.string("key");
      in.finish();
      return reply(c, Status::kOk, h.seq, out.u8(table_.erase(key)).take());
    }
    case Op::kNumKeys:
      in.finish();
      return reply(c, Status::kOk, h.seq, out.i64(table_.num_keys()).take());
    case Op::kHello:
    case Op::kAuth:
      break;  // admit() takes the handshake ops; the range check above excludes them
  }
}

void TcpStoreServer::Loop::park(StoreConnection& c, Op op, uint64_t seq,
                                std::vector<std::string> keys, int64_t timeout_ms) {
  ParkedWait w;
  w.op = op;
  w.seq = seq;
  w.keys = std::move(keys);
  for (const auto& k : w.keys) watchers_[k].insert(c.fd());
  Deadline deadline = store_deadline(timeout_ms);
  if (!deadline.infinite())
    w.timer = events_.add_timer(deadline.time_point(), [this, fd = c.fd()] { expire_wait(fd); });
  c.parked = std::move(w);
}

void TcpStoreServer::Loop::unpark(StoreConnection& c) {
  for (const auto& k : c.parked->keys) {
    auto it = watchers_.find(k);
    if (it == watchers_.end()) continue;
    it->second.erase(c.fd());
    if (it->second.empty()) watchers_.erase(it);
  }
  if (c.parked->timer) events_.cancel_timer(*c.parked->timer);
  c.parked.reset();
}

void TcpStoreServer::Loop::notify(const std::string& key) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  std::vector<int> fds(it->second.begin(), it->second.end());
  for (int fd : fds) {
    auto cit = conns_.find(fd);
    if (cit == conns_.end() || !cit->second->parked) continue;
    StoreConnection& c = *cit->second;
    if (!table_.missing(c.parked->keys).empty()) continue;
    ParkedWait w = *c.parked;
    unpark(c);
    reply(c, Status::kOk, w.seq, w.op == Op::kGet ? *table_.find(w.keys[0]) : std::string());
  }
}

// A parked get/wait reached its deadline (the timer is cancelled when it is answered first).
void TcpStoreServer::Loop::expire_wait(int fd) {
  StoreConnection& c = *conns_.at(fd);
  std::vector<std::string> missing = table_.missing(c.parked->keys);
  uint64_t seq = c.parked->seq;
  c.parked->timer.reset();  // firing now: nothing to cancel
  unpark(c);
  WireWriter<> out;
  store_wire::write_keys(out, missing);
  reply(c, Status::kTimeout, seq, out.take());
}

void TcpStoreServer::Loop::reply(StoreConnection& c, Status status, uint64_t seq,
                                 const std::string& payload) {
  if (c.closing) return;
  c.queue(store_wire::encode_frame(static_cast<uint8_t>(status), seq, payload));
  if (!c.flush()) drop(c, false);
  watch(c);
}

void TcpStoreServer::Loop::drop(StoreConnection& c, bool protocol_violation) {
  if (c.closing) return;
  c.closing = true;
  if (protocol_violation) dropped_->fetch_add(1);
  if (c.parked) unpark(c);
  if (c.handshake_timer) events_.cancel_timer(*c.handshake_timer);
  events_.remove(c.fd());
  events_.post([this, fd = c.fd()] { conns_.erase(fd); });  // after this turn's callbacks
}

TcpStoreServer::TcpStoreServer(const TcpStoreServerOptions& options) {
  try {
    listener_ = Socket::listen(options.host, options.port);
  } catch (const NetworkError& e) {
    throw NetworkError(std::string("TCPStore server: ") + e.what() +
                       " (is another job or store using this port? pass port 0 to pick a free " +
                       "one)");
  }
  enforce_bind_policy(listener_, options.host, !options.auth.token.empty(), options.insecure,
                      "TCPStore server");
  listener_.set_nonblocking(true);
  port_ = listener_.local_port();
  failure_log_ =
      std::make_unique<auth::FailureLog>("TCPStore server on port " + std::to_string(port_));
  loop_ = std::make_unique<Loop>(&listener_, options, &dropped_, failure_log_.get());
  thread_ = std::thread([this] { loop_->run(); });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

void TcpStoreServer::stop() {
  if (thread_.joinable()) {
    loop_->stop();
    thread_.join();
  }
  loop_.reset();
  listener_.close();
}

}  // namespace pscore
