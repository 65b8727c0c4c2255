#include "ps/server/ps_server.h"

#include <sys/socket.h>

#include <chrono>
#include <random>

#include "common/bind_policy.h"
#include "common/error.h"
#include "common/handshake.h"
#include "ps/durability/json.h"
#include "ps/wire/ps_protocol.h"

namespace pscore::ps {
namespace {

// Connections that have not finished the handshake are checked this often.
constexpr int kHandshakeCheckMs = 200;

FrameHeader handshake_header(MsgType type, size_t length) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(type);
  h.length = length;
  return h;
}

ByteBuffer bytes_of(const std::string& s) {
  ByteBuffer b;
  b.append(s.data(), s.size());
  return b;
}

}  // namespace

PsServer::PsServer(const ServerOptions& opts) : opts_(opts) {
  ShardOptions so;
  so.shard = opts.shard;
  so.num_shards = opts.num_shards;
  so.num_workers = opts.num_workers;
  so.recover_dir = opts.recover_dir;
  so.fsync_log = opts.fsync_log;
  so.partition.min_part_bytes = opts.min_part_bytes;
  shard_ = std::make_unique<ShardState>(so);
  snapshots_ = std::make_unique<AutoSnapshot>(*shard_, opts.snapshots);
  handler_ = std::make_unique<RequestHandler>(*shard_, stats_);
  handler_->stats_json = [this] { return stats_json(); };
  handler_->before_request = [this] { snapshots_->admit(); };
  std::random_device rd;
  incarnation_ = (uint64_t(rd()) << 32) | rd();
}

PsServer::~PsServer() {
  try {
    stop(0);
  } catch (const TimeoutError&) {
    // A snapshot is stuck on the disk: the snapshot thread's destructor waits for it.
  }
}

void PsServer::start() {
  if (running_) return;
  if (opts_.num_threads < 1) throw std::invalid_argument("num_threads must be >= 1");
  if (opts_.max_queued_requests < 1)
    throw std::invalid_argument("max_queued_requests must be >= 1");
  replayed_ = shard_->recover();
  listener_ = Socket::listen(opts_.host, opts_.port);
  enforce_bind_policy(listener_, opts_.host, !opts_.auth_token.empty(), opts_.insecure,
                      "parameter server shard " + std::to_string(opts_.shard));
  listener_.set_nonblocking(true);
  port_ = listener_.local_port();
  failures_ = std::make_unique<auth::FailureLog>(
      "parameter server shard " + std::to_string(opts_.shard) + " on port " + std::to_string(port_),
      opts_.log_quiet_ms);
  events_ = std::make_unique<EventLoop>("parameter server shard " + std::to_string(opts_.shard));
  events_->add(listener_.fd(), EPOLLIN, [this](uint32_t) { accept_all(); });
  check_handshakes_later();
  pool_ = std::make_unique<ThreadPool>(opts_.num_threads);
  snapshots_->start();
  started_us_ = now_us();
  running_ = true;
  loop_ = std::thread([this] {
    events_->run();
    close_all();
  });
}

void PsServer::on_event(uint64_t id, uint32_t ev) {
  std::shared_ptr<ServerConnection> c;
  {
    std::lock_guard<std::mutex> lk(conns_mu_);
    auto it = conns_.find(id);
    if (it != conns_.end()) c = it->second;
  }
  if (!c) return;
  if (ev & EPOLLOUT) {
    if (c->on_writable(opts_.max_outbox_bytes / 2)) schedule(c);
  }
  if (ev & EPOLLIN) {
    on_readable(c);
  } else if (ev & (EPOLLERR | EPOLLHUP)) {
    drop(c, "connection reset", false);
  }
  if (c->closed()) drop(c, "closed", false);
}

// A handler thread drained a paused connection's queue far enough: read from it again.
void PsServer::resume_reading(const std::shared_ptr<ServerConnection>& c) {
  {
    std::lock_guard<std::mutex> lk(c->mu);
    c->resume_requested = false;
  }
  if (draining_ || c->closed()) return;
  c->set_reading(true);
  on_readable(c);
}

// stop() began: accept nobody and read nothing more; queued requests and replies go on.
void PsServer::begin_drain() {
  draining_ = true;
  events_->remove(listener_.fd());
  listener_.close();
  std::lock_guard<std::mutex> lk(conns_mu_);
  for (auto& [id, c] : conns_) c->set_reading(false);
}

void PsServer::close_all() {
  std::lock_guard<std::mutex> lk(conns_mu_);
  for (auto& [id, c] : conns_) c->close();
  stats_.connections.store(0);
  conns_.clear();
}

void PsServer::accept_all() {
  for (;;) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or out of descriptors: try again on the next event
    }
    Socket s(fd);
    std::lock_guard<std::mutex> lk(conns_mu_);
    if (static_cast<int>(conns_.size()) >= opts_.max_connections) {
      stats_.dropped_connections.fetch_add(1);
      if (opts_.log_connections)
        failures_->report(s.peer_address(), "refused: " + std::to_string(opts_.max_connections) +
                                                " connections already open");
      continue;
    }
    s.set_nodelay();
    uint64_t id = next_id_++;
    auto c = std::make_shared<ServerConnection>(std::move(s), id, events_.get(), &stats_);
    events_->add(c->fd(), EPOLLIN, [this, id](uint32_t ev) { on_event(id, ev); });
    conns_[id] = c;
    stats_.connections.fetch_add(1);
    stats_.connections_accepted.fetch_add(1);
  }
}

void PsServer::drop(const std::shared_ptr<ServerConnection>& c, const std::string& why,
                    bool violation) {
  c->close();
  {
    std::lock_guard<std::mutex> lk(conns_mu_);
    if (conns_.erase(c->id()) == 0) return;
  }
  stats_.connections.fetch_sub(1);
  if (!violation) return;
  stats_.dropped_connections.fetch_add(1);
  if (opts_.log_connections) failures_->report(c->peer(), why);
}

void PsServer::on_readable(const std::shared_ptr<ServerConnection>& c) {
  std::string why;
  ServerConnection::ReadResult r;
  try {
    r = c->read_available([&](InFrame&& f) { return on_frame(c, std::move(f)); },
                          opts_.max_frame_bytes, &why);
  } catch (const std::exception& e) {
    drop(c, e.what(), true);
    return;
  }
  if (r != ServerConnection::ReadResult::kClosed) return;
  const bool by_peer = why == "closed by peer";
  if (by_peer && c->stage == ServerConnection::Stage::kAwaitAuth) {
    // Gone right after the server's proof: it rejected the proof (the tokens differ), or probed.
    stats_.auth_failures.fetch_add(1);
    drop(c,
         "the client closed the connection after the server's proof (its PSCORE_AUTH_TOKEN "
         "differs from the server's?)",
         true);
    return;
  }
  drop(c, why, !by_peer);
}

ServerConnection::FrameAction PsServer::on_frame(const std::shared_ptr<ServerConnection>& c,
                                                 InFrame&& f) {
  if (c->stage != ServerConnection::Stage::kReady) return handshake(c, f);
  std::unique_lock<std::mutex> lk(c->mu);
  // A peer that does not read its replies stops being served (and, its queue full, read).
  if (c->outbox_bytes_unlocked() > opts_.max_outbox_bytes) c->output_blocked = true;
  // Saves and loads run on the pool: they take long, and the event loop serves everyone.
  const auto type = static_cast<MsgType>(f.header.type);
  const bool slow = type == MsgType::kSave || type == MsgType::kLoad;
  if (!slow && f.header.length <= opts_.inline_max_bytes && c->queue.empty() && !c->scheduled &&
      !c->output_blocked) {
    lk.unlock();  // nothing ahead of it on this connection: handle it here, in order
    handler_->handle(c, std::move(f));
    return c->closed() ? ServerConnection::FrameAction::kClose
                       : ServerConnection::FrameAction::kContinue;
  }
  c->queued_bytes += f.body.size();
  c->queue.push_back(std::move(f));
  stats_.queue_depth.fetch_add(1);
  if (!c->scheduled && !c->output_blocked) {
    c->scheduled = true;
    pool_->submit([this, c] { drain(c); });
  }
  if (static_cast<int>(c->queue.size()) >= opts_.max_queued_requests ||
      c->queued_bytes >= opts_.max_queued_bytes) {
    c->set_reading_locked(false);
    return ServerConnection::FrameAction::kPause;
  }
  return ServerConnection::FrameAction::kContinue;
}

ServerConnection::FrameAction PsServer::handshake(const std::shared_ptr<ServerConnection>& c,
                                                  InFrame& f) {
  // Refusals a well-behaved client should hear about (and not retry) get an error frame before
  // the connection closes; anything else is dropped silently.
  auto fail = [&](const std::string& why, bool auth, bool tell = true) {
    if (auth) stats_.auth_failures.fetch_add(1);
    if (tell) send_error(*c, f.header, static_cast<uint32_t>(ErrorCode::kInvalidArgument), why);
    c->close_reason = why;  // on_readable drops and logs the connection
    return ServerConnection::FrameAction::kClose;
  };
  auto reply = [&](MsgType type, const std::string& body) {
    c->send(handshake_header(type, body.size()), bytes_of(body));
  };
  auto welcome = [&] {
    Welcome w;
    w.shard = opts_.shard;
    w.num_shards = opts_.num_shards;
    w.num_workers = opts_.num_workers;
    w.incarnation = incarnation_;
    reply(MsgType::kWelcome, encode_welcome(w));
    c->stage = ServerConnection::Stage::kReady;
    return ServerConnection::FrameAction::kContinue;
  };
  const auto type = static_cast<MsgType>(f.header.type);
  if (c->stage == ServerConnection::Stage::kAwaitHello) {
    if (type != MsgType::kHello)
      return fail(std::string("expected a hello, got ") + msg_type_name(f.header.type), false,
                  false);
    try {
      c->hello = decode_hello(f.body.data(), f.body.size());
    } catch (const std::exception& e) {
      return fail(e.what(), false, false);
    }
    if (c->hello.version != kProtocolVersion)
      return fail("protocol version " + std::to_string(c->hello.version) + ", this server speaks " +
                      std::to_string(kProtocolVersion) + " (mixed pscore versions?)",
                  false);
    if (c->hello.job_id != opts_.job_id)
      return fail("job id '" + c->hello.job_id + "' is not this server's", true);
    if (c->hello.worker < -1 || c->hello.worker >= opts_.num_workers)
      return fail("worker id " + std::to_string(c->hello.worker) + " outside [-1, " +
                      std::to_string(opts_.num_workers) + ")",
                  false);
    c->auth.emplace(opts_.auth_token, handshake_binding(opts_.job_id, c->hello.worker),
                    kServerName);
    auth::ServerHandshake::Verdict v =
        c->auth->on_hello(c->hello.authenticate, c->hello.client_nonce);
    if (!v.accepted) return fail(v.refusal, true);
    if (c->auth->state() == auth::ServerHandshake::State::kDone) return welcome();
    reply(MsgType::kChallenge,
          encode_challenge({c->auth->server_nonce(), c->auth->server_proof()}));
    c->stage = ServerConnection::Stage::kAwaitAuth;
    return ServerConnection::FrameAction::kContinue;
  }
  if (type != MsgType::kAuth) return fail("expected an auth message", false);
  auth::ServerHandshake::Verdict v = c->auth->on_proof(f.body.data(), f.body.size());
  if (!v.accepted) return fail(v.refusal, true);
  return welcome();
}

void PsServer::schedule(const std::shared_ptr<ServerConnection>& c) {
  std::lock_guard<std::mutex> lk(c->mu);
  if (c->scheduled || c->queue.empty()) return;
  c->scheduled = true;
  pool_->submit([this, c] { drain(c); });
}

void PsServer::drain(const std::shared_ptr<ServerConnection>& c) {
  for (;;) {
    InFrame f;
    bool resume = false;
    {
      std::lock_guard<std::mutex> lk(c->mu);
      if (c->queue.empty()) {
        c->scheduled = false;
        return;
      }
      if (c->outbox_bytes_unlocked() > opts_.max_outbox_bytes) {
        c->output_blocked = true;
        c->scheduled = false;
        return;
      }
      f = std::move(c->queue.front());
      c->queue.pop_front();
      c->queued_bytes -= f.body.size();
      stats_.queue_depth.fetch_sub(1);
      if (!c->reading && !c->resume_requested && !stopping_ &&
          static_cast<int>(c->queue.size()) <= opts_.max_queued_requests / 2 &&
          c->queued_bytes <= opts_.max_queued_bytes / 2) {
        c->resume_requested = true;
        resume = true;
      }
    }
    if (resume) events_->post([this, c] { resume_reading(c); });
    handler_->handle(c, std::move(f));
  }
}

void PsServer::check_handshakes_later() {
  events_->add_timer(Deadline(kHandshakeCheckMs).time_point(), [this] {
    check_handshake_timeouts();
    check_handshakes_later();
  });
}

void PsServer::check_handshake_timeouts() {
  std::vector<std::shared_ptr<ServerConnection>> late;
  int64_t now = now_us();
  {
    std::lock_guard<std::mutex> lk(conns_mu_);
    for (auto& [id, c] : conns_)
      if (c->stage != ServerConnection::Stage::kReady &&
          now - c->opened_us > int64_t(opts_.handshake_timeout_ms) * 1000)
        late.push_back(c);
  }
  for (auto& c : late) drop(c, "no handshake within the timeout", true);
}

bool PsServer::idle() {
  std::lock_guard<std::mutex> lk(conns_mu_);
  for (auto& [id, c] : conns_) {
    std::lock_guard<std::mutex> ck(c->mu);
    if (!c->queue.empty() || c->scheduled || c->outbox_bytes_unlocked() > 0) return false;
  }
  return true;
}

void PsServer::load(const std::string& dir) {
  ReplyOutbox parked;
  shard_->load(dir, parked);
  RequestHandler::send_all(parked);
}

void PsServer::stop(int drain_timeout_ms) {
  std::lock_guard<std::mutex> lk(stop_mu_);
  if (!running_) return;
  stopping_ = true;
  events_->post([this] { begin_drain(); });
  Deadline deadline(drain_timeout_ms);
  while (!deadline.expired() && !idle()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ReplyOutbox unsent;  // the connections close next: parked pushes get no reply
  for (auto& t : shard_->tables()) t->abandon_waiters(unsent);
  events_->stop();
  if (loop_.joinable()) loop_.join();
  pool_->shutdown();
  running_ = false;
  snapshots_->stop();  // after the requests: one waiting in admit() needs the snapshot thread
}

std::string PsServer::stats_json() const {
  Json extra = Json::object();
  extra.set("shard", opts_.shard);
  extra.set("num_shards", opts_.num_shards);
  extra.set("port", port_);
  extra.set("tables", static_cast<int64_t>(shard_->tables().size()));
  int64_t rows = 0, dense_elems = 0;
  for (auto& t : shard_->tables()) {
    auto lk = t->lock();
    rows += t->num_rows();
    dense_elems += t->dense() ? t->part().numel : 0;
  }
  extra.set("sparse_rows", rows);
  {
    uint64_t unsent = 0;
    std::lock_guard<std::mutex> lk(conns_mu_);
    for (const auto& [id, c] : conns_) unsent += c->outbox_bytes();
    extra.set("reply_bytes_queued", unsent);
  }
  extra.set("dense_elements", dense_elems);
  extra.set("uptime_s", static_cast<double>(now_us() - started_us_) / 1e6);
  extra.set("incarnation", std::to_string(incarnation_));
  extra.set("log_bytes", shard_->log_bytes());
  extra.set("snapshots_written", snapshots_->snapshots_written());
  std::string e = extra.dump();
  return stats_.to_json(e.substr(1, e.size() - 2));
}

std::string PsServer::tables_status_json() const {
  std::string out = "[";
  for (auto& t : shard_->tables()) {
    if (out.size() > 1) out += ",";
    out += table_status_json(*t, opts_.num_workers);
  }
  return out + "]";
}

}  // namespace pscore::ps
