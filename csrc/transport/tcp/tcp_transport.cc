#include "transport/tcp/tcp_transport.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/error.h"
#include "common/frame.h"

namespace pscore {
namespace {

enum HandshakeType : uint8_t { kHello = 1, kHelloAck = 2 };
constexpr size_t kMaxJobIdBytes = 256;
constexpr int kHandshakeReadMs = 2000;  // a silent stranger is dropped after this

struct Hello {
  int32_t rank;
  int32_t size;
  int32_t lane;
};

std::string rank_name(int r) { return "rank " + std::to_string(r); }

void send_frame(const Socket& s, uint8_t type, const Hello& hello, const std::string& job,
                const Deadline& deadline, const std::string& who) {
  FrameHeader h;
  h.type = type;
  h.length = sizeof(Hello) + job.size();
  std::string buf(reinterpret_cast<const char*>(&h), sizeof(h));
  buf.append(reinterpret_cast<const char*>(&hello), sizeof(hello));
  buf.append(job);
  s.send_all(buf.data(), buf.size(), deadline, "handshake with " + who);
}

// Reads a handshake frame; throws NetworkError on garbage or a foreign job.
Hello recv_frame(const Socket& s, uint8_t type, const std::string& job, const Deadline& deadline,
                 const std::string& who) {
  FrameHeader h;
  s.recv_all(&h, sizeof(h), deadline, "handshake with " + who);
  validate_frame(h, sizeof(Hello) + kMaxJobIdBytes, who);
  if (h.type != type || h.length < sizeof(Hello))
    throw NetworkError(who + ": unexpected handshake frame type " + std::to_string(h.type));
  Hello hello;
  s.recv_all(&hello, sizeof(hello), deadline, "handshake with " + who);
  std::string peer_job(h.length - sizeof(Hello), '\0');
  s.recv_all(peer_job.data(), peer_job.size(), deadline, "handshake with " + who);
  if (peer_job != job)
    throw NetworkError(who + ": belongs to job '" + peer_job + "', this is job '" + job + "'");
  return hello;
}

}  // namespace

TcpTransport::TcpTransport(int rank, int size, TcpOptions options)
    : rank_(rank), size_(size), options_(std::move(options)) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("rank " + std::to_string(rank) + " out of range for world size " +
                                std::to_string(size));
  if (options_.job_id.size() > kMaxJobIdBytes) throw std::invalid_argument("job id too long");
  channels_.resize(static_cast<size_t>(size) * kNumLanes);
  listener_ = Socket::listen(options_.host, options_.port);
  listener_.set_buffer_bytes(options_.buffer_bytes);
  port_ = listener_.local_port();
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
  await_acks(pending_acks, deadline);
  listener_.close();
}

// Higher ranks dial lower ones: rank r connects to every i < r, once per lane.
void TcpTransport::connect_lower(const std::vector<std::string>& hosts,
                                 const std::vector<int>& ports, const Deadline& deadline,
                                 std::vector<Socket>& pending_acks) {
  for (int peer = 0; peer < rank_; ++peer) {
    for (int lane = 0; lane < kNumLanes; ++lane) {
      Socket s = Socket::connect(hosts[peer], ports[peer], deadline, rank_name(peer));
      s.set_buffer_bytes(options_.buffer_bytes);
      send_frame(s, kHello, Hello{rank_, size_, lane}, options_.job_id, deadline, rank_name(peer));
      pending_acks.push_back(std::move(s));
    }
  }
}

void TcpTransport::accept_higher(const Deadline& deadline) {
  int expected = (size_ - 1 - rank_) * kNumLanes;
  while (expected > 0) {
    Socket s;
    try {
      s = listener_.accept(deadline);
    } catch (const TimeoutError&) {
      throw TimeoutError("rank " + std::to_string(rank_) + ": timed out waiting for " +
                         std::to_string(expected) + " connection(s) from higher ranks");
    }
    std::string who = "connection from " + s.peer_address();
    try {
      Deadline hello_deadline(std::min<int64_t>(kHandshakeReadMs, deadline.remaining_ms()));
      Hello hello = recv_frame(s, kHello, options_.job_id, hello_deadline, who);
      if (hello.size != size_ || hello.rank <= rank_ || hello.rank >= size_ || hello.lane < 0 ||
          hello.lane >= kNumLanes || channels_[hello.rank * kNumLanes + hello.lane])
        throw NetworkError(who + ": bad handshake (rank " + std::to_string(hello.rank) +
                           ", world " + std::to_string(hello.size) + ")");
      send_frame(s, kHelloAck, Hello{rank_, size_, hello.lane}, options_.job_id, deadline, who);
      install(hello.rank, hello.lane, std::move(s));
      --expected;
    } catch (const Error&) {
      // A stranger or garbage on our port: drop it and keep waiting for the real peers.
      continue;
    }
  }
}

void TcpTransport::await_acks(std::vector<Socket>& pending_acks, const Deadline& deadline) {
  size_t i = 0;
  for (int peer = 0; peer < rank_; ++peer) {
    for (int lane = 0; lane < kNumLanes; ++lane, ++i) {
      Socket& s = pending_acks[i];
      Hello ack = recv_frame(s, kHelloAck, options_.job_id, deadline, rank_name(peer));
      if (ack.rank != peer || ack.lane != lane)
        throw NetworkError(rank_name(peer) + ": answered as rank " + std::to_string(ack.rank));
      install(peer, lane, std::move(s));
    }
  }
}

void TcpTransport::install(int peer, int lane, Socket s) {
  channels_[peer * kNumLanes + lane] = std::make_unique<TcpChannel>(std::move(s), rank_name(peer));
}

Channel& TcpTransport::channel(int peer, int lane) {
  auto& c = channels_.at(static_cast<size_t>(peer) * kNumLanes + lane);
  if (!c) throw std::logic_error("no channel to rank " + std::to_string(peer));
  return *c;
}

void TcpTransport::wait(const std::vector<WaitItem>& items, int timeout_ms, uint32_t) {
  std::vector<pollfd> fds;
  fds.reserve(items.size());
  for (const auto& it : items) {
    auto& c = static_cast<TcpChannel&>(channel(it.peer, it.lane));
    fds.push_back(pollfd{c.fd(), static_cast<short>(it.want_write ? POLLOUT : POLLIN), 0});
  }
  int rc = ::poll(fds.data(), fds.size(), timeout_ms);
  if (rc < 0 && errno != EINTR) throw NetworkError(errno_message("poll", errno));
}

void TcpTransport::abort(const std::string& reason) {
  for (auto& c : channels_)
    if (c) c->shutdown();
}

}  // namespace pscore
