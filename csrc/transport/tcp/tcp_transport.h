// Full-mesh TCP transport: one listening socket per rank, one connection per peer and lane,
// a handshake that checks the job id and ranks (and, with a token, a mutual HMAC
// challenge-response, common/auth.h). It sleeps until a socket is ready with poll() for small
// wait sets and an epoll set per lane for large ones (epoll_set.h).
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/auth.h"
#include "common/socket.h"
#include "transport/tcp/epoll_set.h"
#include "transport/tcp/tcp_channel.h"
#include "transport/transport.h"

namespace pscore {

struct TcpOptions {
  std::string host = "127.0.0.1";  // address to listen on
  int port = 0;                    // 0 picks a free port
  int buffer_bytes = 0;            // SO_SNDBUF / SO_RCVBUF; 0: the kernel's autotuning
  std::string job_id = "pscore";
  std::string auth_token;  // the same secret on every rank; "" = no authentication
  bool insecure = false;   // listen on an address other hosts can reach without a token
  // Wait sets of at least this many sockets sleep in epoll_wait, smaller ones in poll(), which
  // costs less when only a few sockets take part (docs/collectives.md).
  int epoll_min_fds = 8;
};

class TcpTransport : public Transport {
 public:
  // A 64 MB all_gather of 2 ranks over loopback, polling: 13 KB a sendmsg and 50 ms of system
  // time a call; sleeping: 380 KB, 29 ms and 0.65-0.9x the time. From 2 MB to 32 MB either took
  // about as long, and polling won below (1 MB: 0.7x).
  static constexpr size_t kPolledItemLimit = 16 << 20;

  // Listens at once (a busy port throws NetworkError; an address other hosts can reach with
  // no token and not `insecure` throws std::invalid_argument); connect() completes the mesh.
  TcpTransport(int rank, int size, TcpOptions options);
  ~TcpTransport() override;

  int port() const { return port_; }
  // Connects to every peer (addresses indexed by rank). Blocks until the mesh is up or the
  // timeout passes; connections that fail the handshake (garbage, wrong job, wrong token) are
  // dropped and failed authentications logged. Throws NetworkError naming the peer when a
  // lower rank refuses this rank or cannot prove it has the same token.
  void connect(const std::vector<std::string>& hosts, const std::vector<int>& ports,
               int64_t timeout_ms);

  const char* name() const override { return "tcp"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Channel& channel(int peer, int lane) override;
  bool costly_steps() const override { return true; }
  size_t polled_item_limit() const override { return kPolledItemLimit; }
  void wait(const std::vector<WaitItem>& items, int timeout_ms, uint32_t token) override;
  void check_peer(int peer) override {}
  void abort(const std::string& reason) override;

 private:
  void connect_lower(const std::vector<std::string>& hosts, const std::vector<int>& ports,
                     const Deadline& deadline, std::vector<Socket>& pending_acks);
  void accept_higher(const Deadline& deadline);
  // Runs the acceptor's side of the handshake on one connection; true when it was installed.
  bool admit(Socket s, const Deadline& deadline);
  // Acceptor: challenges the dialler `peer`; false (refused, logged) when its proof is wrong.
  bool authenticate_dialler(const Socket& s, int peer, int lane, const auth::Nonce& client_nonce,
                            const std::string& address, const Deadline& deadline);
  // Dialler: checks `peer`'s proof, then proves this rank; throws NetworkError on a mismatch.
  void authenticate_to(const Socket& s, int peer, int lane, const auth::Nonce& client_nonce,
                       const std::string& address, const Deadline& deadline);
  // Refuses a dialler with a message it can show, and logs why.
  void refuse(const Socket& s, const std::string& address, const std::string& reason,
              const Deadline& deadline);
  void await_acks(const std::vector<std::string>& hosts, const std::vector<int>& ports,
                  std::vector<Socket>& pending_acks, const Deadline& deadline);
  void install(int peer, int stream, Socket s);
  void build_channels();
  // Sleeps in the lane's epoll set; false when another thread is using it.
  bool wait_in_epoll(int lane, const std::vector<pollfd>& fds, int timeout_ms);

  int rank_;
  int size_;
  TcpOptions options_;
  Socket listener_;
  int port_ = 0;
  std::unique_ptr<auth::FailureLog> failure_log_;
  static constexpr int kNumStreams = 2 * kNumLanes;  // one connection per lane and direction
  std::vector<Socket> sockets_;  // [peer * kNumStreams + stream] while the mesh forms
  std::vector<std::unique_ptr<TcpChannel>> channels_;  // [peer * kNumLanes + lane]
  struct LaneWaiter {
    std::mutex mu;
    std::unique_ptr<EpollSet> set;  // made on first use
  };
  std::array<LaneWaiter, kNumLanes> waiters_;
};

}  // namespace pscore
