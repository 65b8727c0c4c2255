#include "store/tcp_store_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "common/bind_policy.h"
#include "common/error.h"
#include "store/key_value_table.h"
#include "store/store.h"
#include "store/store_connection.h"

namespace pscore {

using store_wire::Op;
using store_wire::Status;

// The server thread's state. Protocol: a client sends one request frame and reads one response
// frame with the same seq before sending the next (a request sent while one is parked drops the
// connection, so a parked connection never has buffered input). get/wait on missing keys park the
// request: the connection is remembered under each key it waits for and in a deadline queue; the
// set/add/compare_set that completes its keys, or its deadline, answers it. Frames that arrive
// before a connection is ready go through its StoreServerHandshake first; with a token, a
// connection that has not authenticated within kStoreHandshakeTimeoutMs is closed.
class TcpStoreServer::Loop {
 public:
  Loop(int listen_fd, int wake_fd, const TcpStoreServerOptions& options,
       std::atomic<int64_t>* dropped, auth::FailureLog* failure_log)
      : listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        max_payload_(options.max_payload_bytes),
        auth_(options.auth),
        dropped_(dropped),
        failure_log_(failure_log) {}
  ~Loop();
  void run();

 private:
  struct DeadlineEntry {
    Clock::time_point at;
    int fd;
    uint64_t wait_id;
    bool operator>(const DeadlineEntry& o) const { return at > o.at; }
  };

  void watch(int fd, uint32_t events, int op);
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
  void expire_waits();
  int next_timeout_ms() const;
  void reply(StoreConnection& c, Status status, uint64_t seq, const std::string& payload);
  void drop(StoreConnection& c, bool protocol_violation);
  void close_dropped();

  int listen_fd_;
  int wake_fd_;
  int epoll_fd_ = -1;
  uint64_t max_payload_;
  StoreAuthOptions auth_;
  std::atomic<int64_t>* dropped_;
  auth::FailureLog* failure_log_;
  uint64_t next_wait_id_ = 1;
  KeyValueTable table_;
  std::unordered_map<int, std::unique_ptr<StoreConnection>> conns_;
  std::unordered_map<std::string, std::unordered_set<int>> watchers_;
  std::priority_queue<DeadlineEntry, std::vector<DeadlineEntry>, std::greater<DeadlineEntry>>
      deadlines_;
  std::vector<int> to_close_;
};

TcpStoreServer::Loop::~Loop() {
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

void TcpStoreServer::Loop::watch(int fd, uint32_t events, int op) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_fd_, op, fd, &ev);
}

void TcpStoreServer::Loop::run() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  watch(listen_fd_, EPOLLIN, EPOLL_CTL_ADD);
  watch(wake_fd_, EPOLLIN, EPOLL_CTL_ADD);
  epoll_event events[64];
  for (;;) {
    int n = ::epoll_wait(epoll_fd_, events, 64, next_timeout_ms());
    if (n < 0 && errno != EINTR) return;  // cannot happen with a valid epoll fd
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wake_fd_) return;
      if (fd == listen_fd_) {
        accept_all();
      } else {
        on_event(fd, events[i].events);
      }
    }
    expire_waits();
    close_dropped();
  }
}

void TcpStoreServer::Loop::accept_all() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a transient failure (EMFILE...): retried on next event
    auto conn = std::make_unique<StoreConnection>(Socket(fd), max_payload_);
    if (!auth_.token.empty()) {
      // Unauthenticated peers get small frames and a few seconds, not the store's memory.
      conn->set_max_payload(kMaxHandshakeBytes);
      conn->handshake_deadline_id = next_wait_id_++;
      deadlines_.push(
          {Deadline(kStoreHandshakeTimeoutMs).time_point(), fd, conn->handshake_deadline_id});
    }
    watch(fd, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
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
  if (!c.closing && c.polling_out != c.wants_write()) {
    c.polling_out = c.wants_write();
    watch(fd, EPOLLIN | EPOLLRDHUP | (c.polling_out ? EPOLLOUT : 0u), EPOLL_CTL_MOD);
  }
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
      c.handshake_deadline_id = 0;
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
  w.id = next_wait_id_++;
  w.op = op;
  w.seq = seq;
  w.keys = std::move(keys);
  for (const auto& k : w.keys) watchers_[k].insert(c.fd());
  Deadline deadline = store_deadline(timeout_ms);
  if (!deadline.infinite()) deadlines_.push({deadline.time_point(), c.fd(), w.id});
  c.parked = std::move(w);
}

void TcpStoreServer::Loop::unpark(StoreConnection& c) {
  for (const auto& k : c.parked->keys) {
    auto it = watchers_.find(k);
    if (it == watchers_.end()) continue;
    it->second.erase(c.fd());
    if (it->second.empty()) watchers_.erase(it);
  }
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

void TcpStoreServer::Loop::expire_waits() {
  auto now = Clock::now();
  while (!deadlines_.empty() && deadlines_.top().at <= now) {
    DeadlineEntry e = deadlines_.top();
    deadlines_.pop();
    auto it = conns_.find(e.fd);
    if (it != conns_.end() && !it->second->closing &&
        it->second->handshake_deadline_id == e.wait_id) {
      drop(*it->second, false);  // connected, but never finished the handshake
      continue;
    }
    if (it == conns_.end() || !it->second->parked || it->second->parked->id != e.wait_id)
      continue;  // answered or disconnected already
    StoreConnection& c = *it->second;
    std::vector<std::string> missing = table_.missing(c.parked->keys);
    uint64_t seq = c.parked->seq;
    unpark(c);
    WireWriter<> out;
    store_wire::write_keys(out, missing);
    reply(c, Status::kTimeout, seq, out.take());
  }
}

int TcpStoreServer::Loop::next_timeout_ms() const {
  if (deadlines_.empty()) return -1;
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadlines_.top().at - Clock::now())
          .count();
  // Round up so the wait is never answered before its deadline.
  return left < 0 ? 0 : static_cast<int>(std::min<int64_t>(left + 1, INT32_MAX));
}

void TcpStoreServer::Loop::reply(StoreConnection& c, Status status, uint64_t seq,
                                 const std::string& payload) {
  if (c.closing) return;
  c.queue(store_wire::encode_frame(static_cast<uint8_t>(status), seq, payload));
  if (!c.flush()) drop(c, false);
  if (!c.closing && c.polling_out != c.wants_write()) {
    c.polling_out = c.wants_write();
    watch(c.fd(), EPOLLIN | EPOLLRDHUP | (c.polling_out ? EPOLLOUT : 0u), EPOLL_CTL_MOD);
  }
}

void TcpStoreServer::Loop::drop(StoreConnection& c, bool protocol_violation) {
  if (c.closing) return;
  c.closing = true;
  if (protocol_violation) dropped_->fetch_add(1);
  if (c.parked) unpark(c);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd(), nullptr);
  to_close_.push_back(c.fd());
}

void TcpStoreServer::Loop::close_dropped() {
  for (int fd : to_close_) conns_.erase(fd);
  to_close_.clear();
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
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw NetworkError(errno_message("TCPStore server: eventfd", errno));
  loop_ = std::make_unique<Loop>(listener_.fd(), wake_fd_, options, &dropped_, failure_log_.get());
  thread_ = std::thread([this] { loop_->run(); });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

void TcpStoreServer::stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    ssize_t rc = ::write(wake_fd_, &one, sizeof(one));
    (void)rc;
    thread_.join();
  }
  loop_.reset();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
  listener_.close();
}

}  // namespace pscore
