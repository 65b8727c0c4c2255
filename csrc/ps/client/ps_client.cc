#include "ps/client/ps_client.h"

#include <algorithm>
#include <chrono>
#include <climits>

#include "common/clock.h"
#include "common/error.h"
#include "ps/wire/ps_handshake.h"

namespace pscore::ps {
namespace {

// Request deadlines are checked at least this often (and at the earliest one).
constexpr int64_t kDeadlineCheckMs = 100;

}  // namespace

PsClient::PsClient(const ClientOptions& opts, int num_shards)
    : opts_(opts),
      num_shards_(num_shards),
      events_("parameter-server client"),
      link_up_(num_shards, 0),
      link_error_(num_shards),
      incarnations_(num_shards, 0),
      addresses_(num_shards),
      links_(num_shards),
      want_out_(num_shards, false) {
  if (num_shards < 1) throw std::invalid_argument("num_shards must be >= 1");
  if (opts.timeout_ms <= 0) throw std::invalid_argument("timeout_ms must be > 0");
  for (int s = 0; s < num_shards; ++s) link_error_[s] = "never connected";
  // Sequence numbers start at the wall clock in microseconds, so a restarted worker's pushes
  // number above those of its previous life and are not mistaken for retries.
  next_seq_ = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
  check_deadlines_at(Clock::now() + std::chrono::milliseconds(kDeadlineCheckMs));
  io_ = std::thread([this] {
    events_.run();
    close_all();
  });
}

PsClient::~PsClient() {
  events_.stop();
  if (io_.joinable()) io_.join();
}

// New links and queued requests are taken over by the I/O thread.
void PsClient::wake() {
  events_.post([this] {
    std::lock_guard<std::mutex> links(links_mu_);
    install_pending();
  });
}

void PsClient::connect(int shard, const std::string& host, int port, int64_t timeout_ms) {
  if (shard < 0 || shard >= num_shards_)
    throw std::invalid_argument("shard " + std::to_string(shard) + " is outside [0, " +
                                std::to_string(num_shards_) + ")");
  std::string address = host + ":" + std::to_string(port);
  std::string who = "shard " + std::to_string(shard) + " (" + address + ")";
  Deadline deadline(timeout_ms > 0 ? timeout_ms : opts_.connect_timeout_ms);
  Socket s = Socket::connect(host, port, deadline, who);
  s.set_nodelay();
  ClientHandshake hs{opts_.worker, opts_.job_id, opts_.auth_token, who};
  Welcome w = client_handshake(s, hs, deadline);
  if (w.shard != shard || w.num_shards != num_shards_)
    throw NetworkError(who + " is shard " + std::to_string(w.shard) + " of " +
                       std::to_string(w.num_shards) + ", expected shard " + std::to_string(shard) +
                       " of " + std::to_string(num_shards_));
  s.set_nonblocking(true);
  auto link = std::make_unique<ClientLink>(shard, address, std::move(s), w.incarnation,
                                           opts_.max_reply_bytes);
  {
    std::lock_guard<std::mutex> lk(mu_);
    new_links_.push_back(std::move(link));
    link_up_[shard] = 1;
    link_error_[shard].clear();
    incarnations_[shard] = w.incarnation;
    addresses_[shard] = address;
  }
  wake();
}

bool PsClient::connected(int shard) {
  std::lock_guard<std::mutex> lk(mu_);
  return shard >= 0 && shard < num_shards_ && link_up_[shard];
}

std::string PsClient::link_error(int shard) {
  std::lock_guard<std::mutex> lk(mu_);
  return shard >= 0 && shard < num_shards_ ? link_error_[shard] : "no such shard";
}

uint64_t PsClient::incarnation(int shard) {
  std::lock_guard<std::mutex> lk(mu_);
  return shard >= 0 && shard < num_shards_ ? incarnations_[shard] : 0;
}

void PsClient::submit(const std::shared_ptr<Work>& w,
                      std::vector<std::shared_ptr<SubRequest>> subs) {
  const int64_t deadline = now_us() + opts_.timeout_ms * 1000;
  for (auto& s : subs) {
    s->owner = w;
    s->deadline_us = deadline;
  }
  std::lock_guard<std::mutex> links(links_mu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!pending_.empty() || !new_links_.empty()) {  // keep the order: queue behind them
      for (auto& s : subs) pending_.push_back(s);
      wake();
      return;
    }
  }
  // Fast path: enqueue and write from this thread; the I/O thread takes over what the socket
  // does not accept now, and reads the replies.
  std::vector<int> touched;
  for (auto& s : subs) {
    auto& link = links_[s->shard];
    if (!link) {
      fail_unconnected(s);
      continue;
    }
    link->enqueue(s);
    if (std::find(touched.begin(), touched.end(), s->shard) == touched.end())
      touched.push_back(s->shard);
  }
  for (int shard : touched) {
    std::string why;
    if (!links_[shard]->write_some(&why)) {
      fail_link(shard, why, false);
      continue;
    }
    update_interest(*links_[shard]);
  }
}

void PsClient::retry(const std::shared_ptr<Work>& work) {
  auto failed = work->take_failed();
  if (failed.empty()) return;
  const int64_t deadline = now_us() + opts_.timeout_ms * 1000;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& s : failed) {
      s->deadline_us = deadline;
      pending_.push_back(s);
    }
  }
  wake();
}

void PsClient::fail_sub(const std::shared_ptr<SubRequest>& s, std::exception_ptr e,
                        bool retryable) {
  s->error = std::move(e);
  s->retryable_error = retryable;
  if (auto w = s->owner.lock()) w->finish_sub(*s);
}

// A request for a shard with no live link fails retryably, saying why the link went.
void PsClient::fail_unconnected(const std::shared_ptr<SubRequest>& s) {
  std::string why = link_error(s->shard);
  fail_sub(s,
           std::make_exception_ptr(NetworkError(s->what + ": shard " + std::to_string(s->shard) +
                                                " is not connected (" + why + ")")),
           true);
}

void PsClient::finish(const std::shared_ptr<SubRequest>& s) {
  auto w = s->owner.lock();
  if (!w) return;  // nobody waits, and the caller's arrays may be gone
  if (!s->table_missing.empty() && s->header.tag != 0) s->error = missing_table_error(*s);
  if (!s->error && s->on_reply) {
    try {
      s->on_reply(*s);
    } catch (...) {
      s->error = std::current_exception();
      s->retryable_error = false;
    }
  }
  w->finish_sub(*s);
}

void PsClient::update_interest(ClientLink& link) {
  bool want = link.wants_write();
  if (want == want_out_[link.shard()]) return;
  want_out_[link.shard()] = want;
  events_.modify(link.fd(), EPOLLIN | (want ? uint32_t(EPOLLOUT) : 0u));
}

void PsClient::fail_link(int shard, const std::string& why, bool timed_out) {
  auto& link = links_[shard];
  if (!link) return;
  const std::string name = link->name();
  events_.remove(link->fd());
  auto subs = link->take_all();
  link->close();
  link.reset();
  want_out_[shard] = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    link_up_[shard] = 0;
    link_error_[shard] = why;
  }
  const int64_t now = now_us();
  for (auto& s : subs) {
    if (timed_out && s->deadline_us <= now) {
      fail_sub(s,
               std::make_exception_ptr(TimeoutError(s->what + " on " + name + " timed out after " +
                                                    std::to_string(opts_.timeout_ms) +
                                                    " ms without a reply")),
               true);
    } else {
      fail_sub(s,
               std::make_exception_ptr(NetworkError(s->what + " on " + name + " failed: " + why)),
               true);
    }
  }
}

void PsClient::install_pending() {
  std::vector<std::unique_ptr<ClientLink>> fresh;
  std::vector<std::shared_ptr<SubRequest>> pending;
  {
    std::lock_guard<std::mutex> lk(mu_);
    fresh.swap(new_links_);
    pending.swap(pending_);
  }
  for (auto& link : fresh) {
    int shard = link->shard();
    if (links_[shard]) {
      fail_link(shard, "replaced by a new connection", false);
      std::lock_guard<std::mutex> lk(mu_);
      link_up_[shard] = 1;
      link_error_[shard].clear();
    }
    ClientLink* l = link.get();
    events_.add(link->fd(), EPOLLIN,
                [this, shard, l](uint32_t events) { on_link_event(shard, l, events); });
    want_out_[shard] = false;
    links_[shard] = std::move(link);
  }
  for (auto& s : pending) {
    auto& link = links_[s->shard];
    if (!link) {
      fail_unconnected(s);
      continue;
    }
    link->enqueue(s);
  }
  for (auto& link : links_) {
    if (!link || !link->wants_write()) continue;
    std::string why;
    if (!link->write_some(&why)) {
      fail_link(link->shard(), why, false);
      continue;
    }
    update_interest(*link);
  }
}

// `l` identifies the link the event was registered for; it is not dereferenced before it is
// known to be the shard's live link.
void PsClient::on_link_event(int shard, const ClientLink* l, uint32_t events) {
  std::vector<std::shared_ptr<SubRequest>> done;
  {
    std::lock_guard<std::mutex> links(links_mu_);
    if (links_[shard].get() != l) return;  // failed by a caller thread meanwhile
    ClientLink& link = *links_[shard];
    std::string why;
    if ((events & EPOLLOUT) && !link.write_some(&why)) return fail_link(shard, why, false);
    if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && !link.read_some(&why, done)) {
      fail_link(shard, why, false);
    } else {
      update_interest(link);
    }
  }
  for (auto& s : done) finish(s);
}

// Fails the links with a request past its deadline, then checks again at the earliest deadline
// left (or kDeadlineCheckMs from now, for requests sent meanwhile).
void PsClient::check_deadlines_at(Clock::time_point at) {
  events_.add_timer(at, [this] {
    std::lock_guard<std::mutex> links(links_mu_);
    const int64_t now = now_us();
    for (auto& link : links_)
      if (link && link->earliest_deadline() <= now)
        fail_link(link->shard(), "no reply within " + std::to_string(opts_.timeout_ms) + " ms",
                  true);
    int64_t next_us = now + kDeadlineCheckMs * 1000;
    for (auto& link : links_)
      if (link) next_us = std::min(next_us, link->earliest_deadline());
    check_deadlines_at(Clock::now() + std::chrono::microseconds(next_us - now));
  });
}

void PsClient::close_all() {
  std::lock_guard<std::mutex> links(links_mu_);
  for (int s = 0; s < num_shards_; ++s) fail_link(s, "client closed", false);
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& s : pending_)
    fail_sub(s, std::make_exception_ptr(NetworkError(s->what + ": client closed")), false);
  pending_.clear();
}

}  // namespace pscore::ps
