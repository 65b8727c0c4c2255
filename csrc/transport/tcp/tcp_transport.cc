#include "transport/tcp/tcp_transport.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

#include "common/bind_policy.h"
#include "common/error.h"
#include "common/frame_io.h"
#include "common/wire_codec.h"

namespace pscore {
namespace {

// The mesh handshake. The dialler (the higher rank) sends kHello: {rank, size, lane}, then its
// 32-byte nonce when header.flags has kFlagAuthenticate, then the job id. Without a token the
// acceptor answers kHelloAck ({rank, size, lane} + job id). With a token it answers kChallenge
// (its nonce + its proof); the dialler checks that proof and answers kAuth (its proof); the
// acceptor checks it and then sends kHelloAck. Any refusal is a kRefused frame carrying a
// message for the dialler, then the acceptor closes the connection.
enum HandshakeType : uint8_t {
  kHello = 1,
  kHelloAck = 2,
  kChallenge = 3,
  kAuth = 4,
  kRefused = 5,
};
constexpr uint16_t kFlagAuthenticate = 1;
constexpr size_t kMaxJobIdBytes = 256;
constexpr size_t kMaxHandshakeBytes = 1024;  // hello with nonce and job id, or a refusal
constexpr int kHandshakeReadMs = 2000;       // a silent stranger is dropped after this

struct Hello {
  int32_t rank;
  int32_t size;
  int32_t lane;
};

std::string rank_name(int r) { return "rank " + std::to_string(r); }

std::string address(const std::string& host, int port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

void send_handshake(const Socket& s, uint8_t type, uint16_t flags, const std::string& payload,
                    const Deadline& deadline, const std::string& who) {
  FrameHeader h;
  h.type = type;
  h.flags = flags;
  send_frame(s, h, payload, deadline, "handshake with " + who);
}

// Reads one handshake frame; throws NetworkError on garbage, TimeoutError past the deadline.
Frame recv_handshake(const Socket& s, const Deadline& deadline, const std::string& who) {
  return recv_frame(s, kMaxHandshakeBytes, deadline, who, "handshake with " + who);
}

std::string hello_payload(const Hello& hello, const auth::Nonce* nonce, const std::string& job) {
  WireWriter<> w;
  w.i32(hello.rank).i32(hello.size).i32(hello.lane);
  if (nonce) w.bytes(nonce->data(), nonce->size());
  return w.bytes(job.data(), job.size()).take();  // the rest of the payload
}

// Parses a kHello or kHelloAck (its job id into *job); throws NetworkError for another type or
// garbage.
Hello parse_hello(const Frame& f, uint8_t type, std::string* job, auth::Nonce* nonce,
                  const std::string& who) {
  if (f.header.type != type)
    throw NetworkError(who + ": unexpected handshake frame type " + std::to_string(f.header.type));
  WireReader r(f.payload.data(), f.payload.size(), who);
  Hello hello;
  hello.rank = r.i32("rank");
  hello.size = r.i32("size");
  hello.lane = r.i32("lane");
  if (type == kHello && (f.header.flags & kFlagAuthenticate))
    r.copy_to(nonce->data(), nonce->size(), "nonce");
  *job = std::string(r.rest());
  return hello;
}

// Both proofs name the job, both ranks, the lane and the world size, so a proof made for one
// connection of the mesh is worthless on any other.
auth::Binding binding(const std::string& job, int dialler, int acceptor, int lane, int size) {
  return {job, "pscore tcp transport: " + rank_name(dialler) + " -> " + rank_name(acceptor) +
                   ", lane " + std::to_string(lane) + " of a world of " + std::to_string(size)};
}

std::string auth_failed(int peer, const std::string& where) {
  return "authentication with " + rank_name(peer) + " at " + where +
         " failed (wrong PSCORE_AUTH_TOKEN?)";
}

std::string refused(int peer, const std::string& where, const std::string& reason) {
  return rank_name(peer) + " at " + where + " refused this rank's connection: " + reason;
}

std::string job_mismatch(const std::string& who, const std::string& theirs,
                         const std::string& ours) {
  return who + " belongs to job '" + theirs + "', this is job '" + ours + "' (PSCORE_JOB_ID)";
}

}  // namespace

TcpTransport::TcpTransport(int rank, int size, TcpOptions options)
    : rank_(rank), size_(size), options_(std::move(options)) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("rank " + std::to_string(rank) + " out of range for world size " +
                                std::to_string(size));
  if (options_.job_id.size() > kMaxJobIdBytes) throw std::invalid_argument("job id too long");
  channels_.resize(static_cast<size_t>(size) * kNumLanes);
  sockets_.resize(static_cast<size_t>(size) * kNumStreams);
  listener_ = Socket::listen(options_.host, options_.port);
  enforce_bind_policy(listener_, options_.host, !options_.auth_token.empty(), options_.insecure,
                      rank_name(rank) + " (tcp transport)");
  listener_.set_buffer_bytes(options_.buffer_bytes);
  port_ = listener_.local_port();
  failure_log_ = std::make_unique<auth::FailureLog>(rank_name(rank) + " (tcp transport, port " +
                                                    std::to_string(port_) + ")");
}

TcpTransport::~TcpTransport() = default;

void TcpTransport::connect(const std::vector<std::string>& hosts, const std::vector<int>& ports,
                           int64_t timeout_ms) {
  if (static_cast<int>(hosts.size()) != size_ || static_cast<int>(ports.size()) != size_)
    throw std::invalid_argument("connect: need one address per rank");
  Deadline deadline(timeout_ms);
  std::vector<Socket> pending_acks;
  connect_lower(hosts, ports, deadline, pending_acks);
  accept_higher(deadline);
  await_acks(hosts, ports, pending_acks, deadline);
  listener_.close();
  build_channels();
}

// Higher ranks dial lower ones: rank r connects to every i < r, once per stream (two per lane, one
// for each direction, so a rank's sends never wait on the socket lock its receives hold, and the
// kernel delivers into one socket while the owner writes another). With a token the
// challenge-response runs here, before the next dial: the lower rank answers it as soon as it
// reaches accept_higher(), and rank 0 gets there first, so the chain always moves.
void TcpTransport::connect_lower(const std::vector<std::string>& hosts,
                                 const std::vector<int>& ports, const Deadline& deadline,
                                 std::vector<Socket>& pending_acks) {
  bool authenticate = !options_.auth_token.empty();
  for (int peer = 0; peer < rank_; ++peer) {
    for (int lane = 0; lane < kNumStreams; ++lane) {
      Socket s = Socket::connect(hosts[peer], ports[peer], deadline, rank_name(peer));
      s.set_buffer_bytes(options_.buffer_bytes);
      auth::Nonce nonce{};
      if (authenticate) nonce = auth::random_nonce();
      send_handshake(s, kHello, authenticate ? kFlagAuthenticate : 0,
                     hello_payload(Hello{rank_, size_, lane}, authenticate ? &nonce : nullptr,
                                   options_.job_id),
                     deadline, rank_name(peer));
      if (authenticate)
        authenticate_to(s, peer, lane, nonce, address(hosts[peer], ports[peer]), deadline);
      pending_acks.push_back(std::move(s));
    }
  }
}

void TcpTransport::authenticate_to(const Socket& s, int peer, int lane,
                                   const auth::Nonce& client_nonce, const std::string& where,
                                   const Deadline& deadline) {
  Frame f;
  try {
    f = recv_handshake(s, deadline, rank_name(peer));
  } catch (const NetworkError& e) {
    throw NetworkError(rank_name(peer) + " at " + where +
                       " closed the connection during the handshake: " + e.what());
  }
  if (f.header.type == kRefused) throw NetworkError(refused(peer, where, f.payload));
  if (f.header.type != kChallenge)
    throw NetworkError(auth_failed(peer, where) + ": unexpected handshake frame type " +
                       std::to_string(f.header.type));
  const std::string context = auth_failed(peer, where) + ": challenge";
  WireReader r(f.payload.data(), f.payload.size(), context);
  auth::Nonce server_nonce;
  r.copy_to(server_nonce.data(), server_nonce.size(), "server nonce");
  const uint8_t* their_proof = r.raw(auth::kProofBytes, "server proof");
  r.finish();
  auth::Binding b = binding(options_.job_id, rank_, peer, lane, size_);
  auth::Proof expected = auth::server_proof(options_.auth_token, server_nonce, client_nonce, b);
  if (!auth::proof_matches(expected, their_proof, auth::kProofBytes))
    throw NetworkError(auth_failed(peer, where) + ": " + rank_name(peer) +
                       " could not prove it knows this rank's token");
  auth::Proof proof = auth::client_proof(options_.auth_token, server_nonce, client_nonce, b);
  send_handshake(s, kAuth, 0, WireWriter<>().bytes(proof.data(), proof.size()).take(), deadline,
                 rank_name(peer));
}

void TcpTransport::accept_higher(const Deadline& deadline) {
  int expected = (size_ - 1 - rank_) * kNumStreams;
  while (expected > 0) {
    Socket s;
    try {
      s = listener_.accept(deadline);
    } catch (const TimeoutError&) {
      std::string failures = failure_log_->summary();
      throw TimeoutError(rank_name(rank_) + ": timed out waiting for " + std::to_string(expected) +
                         " connection(s) from higher ranks" +
                         (failures.empty() ? "" : " (" + failures + ")"));
    }
    try {
      if (admit(std::move(s), deadline)) --expected;
    } catch (const Error&) {
      // A stranger or garbage on our port: drop it and keep waiting for the real peers.
      continue;
    }
  }
}

bool TcpTransport::admit(Socket s, const Deadline& deadline) {
  std::string peer_address = s.peer_address();
  std::string who = "connection from " + peer_address;
  Deadline hello_deadline(deadline.infinite()
                              ? kHandshakeReadMs
                              : std::min<int64_t>(kHandshakeReadMs, deadline.remaining_ms()));
  auth::Nonce client_nonce{};
  Frame f = recv_handshake(s, hello_deadline, who);
  std::string job;
  Hello hello = parse_hello(f, kHello, &job, &client_nonce, who);
  if (job != options_.job_id) {
    refuse(s, peer_address, job_mismatch(who, job, options_.job_id), hello_deadline);
    return false;
  }
  if (hello.size != size_ || hello.rank <= rank_ || hello.rank >= size_ || hello.lane < 0 ||
      hello.lane >= kNumStreams || sockets_[hello.rank * kNumStreams + hello.lane].valid()) {
    refuse(s, peer_address,
           who + ": bad handshake (rank " + std::to_string(hello.rank) + ", lane " +
               std::to_string(hello.lane) + ", world " + std::to_string(hello.size) +
               "): " + rank_name(rank_) + " of a world of " + std::to_string(size_) +
               " expects each higher rank once per stream",
           hello_deadline);
    return false;
  }
  bool wants_auth = (f.header.flags & kFlagAuthenticate) != 0;
  bool have_token = !options_.auth_token.empty();
  if (wants_auth && !have_token) {
    refuse(s, peer_address,
           rank_name(rank_) + " has no PSCORE_AUTH_TOKEN but " + rank_name(hello.rank) +
               " has one: set the same token on every rank, or on none",
           hello_deadline);
    return false;
  }
  if (!wants_auth && have_token) {
    refuse(s, peer_address,
           rank_name(rank_) + " requires authentication: set PSCORE_AUTH_TOKEN (or " +
               "PSCORE_AUTH_TOKEN_FILE) to the job's secret on " + rank_name(hello.rank) + " too",
           hello_deadline);
    return false;
  }
  if (wants_auth &&
      !authenticate_dialler(s, hello.rank, hello.lane, client_nonce, peer_address, hello_deadline))
    return false;
  send_handshake(s, kHelloAck, 0,
                 hello_payload(Hello{rank_, size_, hello.lane}, nullptr, options_.job_id), deadline,
                 who);
  install(hello.rank, hello.lane, std::move(s));
  return true;
}

bool TcpTransport::authenticate_dialler(const Socket& s, int peer, int lane,
                                        const auth::Nonce& client_nonce,
                                        const std::string& peer_address, const Deadline& deadline) {
  auth::Nonce server_nonce = auth::random_nonce();
  auth::Binding b = binding(options_.job_id, peer, rank_, lane, size_);
  auth::Proof mine = auth::server_proof(options_.auth_token, server_nonce, client_nonce, b);
  WireWriter<> challenge;
  challenge.bytes(server_nonce.data(), server_nonce.size()).bytes(mine.data(), mine.size());
  send_handshake(s, kChallenge, 0, challenge.take(), deadline, rank_name(peer));
  Frame f;
  try {
    f = recv_handshake(s, deadline, rank_name(peer));
  } catch (const Error&) {
    failure_log_->report(peer_address, rank_name(peer) + " closed the connection after " +
                                           rank_name(rank_) +
                                           "'s proof (its PSCORE_AUTH_TOKEN differs?)");
    return false;
  }
  auth::Proof expected = auth::client_proof(options_.auth_token, server_nonce, client_nonce, b);
  if (f.header.type != kAuth ||
      !auth::proof_matches(expected, f.payload.data(), f.payload.size())) {
    refuse(s, peer_address,
           "the proof of " + rank_name(peer) + " does not match the token of " + rank_name(rank_),
           deadline);
    return false;
  }
  return true;
}

void TcpTransport::refuse(const Socket& s, const std::string& peer_address,
                          const std::string& reason, const Deadline& deadline) {
  failure_log_->report(peer_address, reason);
  try {
    send_handshake(s, kRefused, 0, reason, deadline, peer_address);
  } catch (const Error&) {
    // The dialler is gone already; nothing more to tell it.
  }
}

void TcpTransport::await_acks(const std::vector<std::string>& hosts, const std::vector<int>& ports,
                              std::vector<Socket>& pending_acks, const Deadline& deadline) {
  size_t i = 0;
  for (int peer = 0; peer < rank_; ++peer) {
    for (int lane = 0; lane < kNumStreams; ++lane, ++i) {
      Socket& s = pending_acks[i];
      Frame f = recv_handshake(s, deadline, rank_name(peer));
      if (f.header.type == kRefused)
        throw NetworkError(refused(peer, address(hosts[peer], ports[peer]), f.payload));
      std::string job;
      Hello ack = parse_hello(f, kHelloAck, &job, nullptr, rank_name(peer));
      if (job != options_.job_id)
        throw NetworkError(job_mismatch(rank_name(peer), job, options_.job_id));
      if (ack.rank != peer || ack.lane != lane)
        throw NetworkError(rank_name(peer) + ": answered as rank " + std::to_string(ack.rank));
      install(peer, lane, std::move(s));
    }
  }
}

void TcpTransport::install(int peer, int stream, Socket s) {
  sockets_[peer * kNumStreams + stream] = std::move(s);
}

// Stream 2*lane carries the lower rank's bytes to the higher one, stream 2*lane+1 the reverse.
void TcpTransport::build_channels() {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    for (int lane = 0; lane < kNumLanes; ++lane) {
      int up = peer * kNumStreams + 2 * lane;
      Socket& to_higher = sockets_[up];
      Socket& to_lower = sockets_[up + 1];
      bool lower = rank_ < peer;
      channels_[peer * kNumLanes + lane] =
          std::make_unique<TcpChannel>(std::move(lower ? to_higher : to_lower),
                                       std::move(lower ? to_lower : to_higher), rank_name(peer));
    }
  }
  sockets_.clear();
}

Channel& TcpTransport::channel(int peer, int lane) {
  auto& c = channels_.at(static_cast<size_t>(peer) * kNumLanes + lane);
  if (!c) throw std::logic_error("no channel to rank " + std::to_string(peer));
  return *c;
}

bool TcpTransport::wait_in_epoll(int lane, const std::vector<pollfd>& fds, int timeout_ms) {
  LaneWaiter& w = waiters_.at(static_cast<size_t>(lane));
  std::unique_lock<std::mutex> lock(w.mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  if (!w.set) w.set = std::make_unique<EpollSet>();
  w.set->wait(fds, timeout_ms);
  return true;
}

void TcpTransport::wait(const std::vector<WaitItem>& items, int timeout_ms, uint32_t) {
  std::vector<pollfd> fds;
  fds.reserve(items.size());
  for (const auto& it : items) {
    auto& c = static_cast<TcpChannel&>(channel(it.peer, it.lane));
    fds.push_back(it.want_write ? pollfd{c.tx_fd(), POLLOUT, 0} : pollfd{c.rx_fd(), POLLIN, 0});
  }
  // The lane's set serves one waiter at a time (a wait's items come from one lane's exchange;
  // were they mixed, the set would simply follow them).
  if (!items.empty() && static_cast<int>(fds.size()) >= options_.epoll_min_fds &&
      wait_in_epoll(items.front().lane, fds, timeout_ms)) {
    return;
  }
  int rc = ::poll(fds.data(), fds.size(), timeout_ms);
  if (rc < 0 && errno != EINTR) throw NetworkError(errno_message("poll", errno));
}

void TcpTransport::abort(const std::string& reason) {
  for (auto& c : channels_)
    if (c) c->shutdown();
}

}  // namespace pscore
