// The parameter server for one shard: a TCP listener and an event loop (common/event_loop.h)
// serving many
// connections (handshake with optional HMAC auth, framing, bounded per-connection queues), a
// pool of handler threads executing requests against the shard's tables, and a drain-then-stop
// shutdown. Nothing here touches Python.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/auth.h"
#include "common/event_loop.h"
#include "common/socket.h"
#include "ps/server/auto_snapshot.h"
#include "ps/server/request_handler.h"
#include "ps/server/server_connection.h"
#include "ps/server/server_stats.h"
#include "ps/server/shard_state.h"
#include "ps/server/table_status.h"
#include "ps/server/thread_pool.h"

namespace pscore::ps {

struct ServerOptions {
  std::string host = "127.0.0.1";  // one other hosts can reach needs auth_token or insecure
  int port = 0;                    // 0 picks a free port
  int shard = 0;
  int num_shards = 1;
  int num_workers = 1;
  std::string auth_token;  // empty: no authentication
  bool insecure = false;   // allow a non-loopback bind without a token
  std::string job_id;      // clients must present the same job id
  int num_threads = 2;     // request handler threads
  // Requests up to this size are handled on the event-loop thread when their connection has
  // nothing queued (no thread hand-off); bigger ones go to the handler threads.
  uint64_t inline_max_bytes = 2 << 20;
  uint64_t max_frame_bytes = uint64_t(1) << 30;
  int max_queued_requests = 32;                     // per connection; reading pauses beyond it
  uint64_t max_queued_bytes = uint64_t(512) << 20;  // per connection; reading pauses beyond it
  uint64_t max_outbox_bytes = uint64_t(256) << 20;  // per connection; handling pauses beyond it
  int max_connections = 1024;
  int handshake_timeout_ms = 10000;
  std::string recover_dir;  // snapshot + write-ahead log directory (see ShardOptions)
  bool fsync_log = false;
  SnapshotPolicy snapshots;  // automatic snapshots into recover_dir (bounds the log)
  int64_t min_part_bytes = 64 * 1024;
  bool log_connections = true;  // log dropped connections to stderr
  // A peer address's dropped connections are logged at most once per this period.
  int64_t log_quiet_ms = 60000;
};

class PsServer {
 public:
  explicit PsServer(const ServerOptions& opts);
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  // Binds, recovers state from recover_dir when set, and starts serving. Throws
  // std::invalid_argument for a refused configuration, NetworkError when the port is busy.
  void start();
  int port() const { return port_; }
  const std::string& host() const { return opts_.host; }
  uint64_t incarnation() const { return incarnation_; }
  uint64_t replayed_records() const { return replayed_; }
  // Stops accepting, lets queued requests finish and replies flush (up to drain_timeout_ms),
  // then closes every connection, then waits for a snapshot being written (TimeoutError after
  // the snapshot policy's stop_timeout_ms). Parked sync/ssp pushes are not acknowledged.
  // Idempotent.
  void stop(int drain_timeout_ms);
  bool running() const { return running_; }
  uint64_t snapshots_written() const { return snapshots_->snapshots_written(); }
  bool snapshot_in_progress() const { return snapshots_->writing(); }
  std::string stats_json() const;
  // Every table's consistency state on this shard (table_status.h), as a JSON array.
  std::string tables_status_json() const;
  ShardState& shard() { return *shard_; }
  // Loads a checkpoint into this shard (as a load request does); parked pushes are answered as
  // dropped.
  void load(const std::string& dir);

 private:
  // The event-loop thread.
  void accept_all();
  void on_event(uint64_t id, uint32_t events);
  void resume_reading(const std::shared_ptr<ServerConnection>& c);
  void begin_drain();
  void close_all();
  void check_handshakes_later();
  void on_readable(const std::shared_ptr<ServerConnection>& c);
  ServerConnection::FrameAction on_frame(const std::shared_ptr<ServerConnection>& c, InFrame&& f);
  ServerConnection::FrameAction handshake(const std::shared_ptr<ServerConnection>& c, InFrame& f);
  void schedule(const std::shared_ptr<ServerConnection>& c);
  void drain(const std::shared_ptr<ServerConnection>& c);
  void drop(const std::shared_ptr<ServerConnection>& c, const std::string& why, bool violation);
  void check_handshake_timeouts();
  bool idle();

  ServerOptions opts_;
  std::unique_ptr<ShardState> shard_;
  std::unique_ptr<AutoSnapshot> snapshots_;
  ServerStats stats_;
  std::unique_ptr<RequestHandler> handler_;
  std::unique_ptr<ThreadPool> pool_;
  Socket listener_;
  std::unique_ptr<auth::FailureLog> failures_;  // dropped peers, rate-limited per address
  int port_ = 0;
  uint64_t incarnation_ = 0;
  uint64_t replayed_ = 0;
  int64_t started_us_ = 0;
  std::unique_ptr<EventLoop> events_;  // made by start()
  std::thread loop_;
  std::atomic<bool> running_{false}, stopping_{false};
  bool draining_ = false;  // event-loop thread
  mutable std::mutex conns_mu_;
  std::map<uint64_t, std::shared_ptr<ServerConnection>> conns_;
  uint64_t next_id_ = 16;
  std::mutex stop_mu_;
};

}  // namespace pscore::ps
