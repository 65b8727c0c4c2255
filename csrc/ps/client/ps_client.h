// The parameter-server client: one connection per shard driven by a background I/O thread
// running an event loop (common/event_loop.h).
// Operations split a tensor by the table's layout (dense parts, sparse ids hashed to shards),
// send every shard's part at once and return a Work; arrays are read and written in place, so
// the caller keeps them alive until the work completes. No Python here; nothing blocks the
// caller except wait() and the blocking helpers (create_table, lookup_table, connect).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/event_loop.h"
#include "gpu/pinned_pool.h"
#include "ps/client/client_link.h"
#include "ps/client/client_work.h"
#include "ps/wire/ps_protocol.h"
#include "ps/wire/table_spec.h"

namespace pscore::ps {

struct ClientOptions {
  int worker = 0;  // this worker's id in [0, num_workers); -1 for a read-only observer
  std::string job_id;
  std::string auth_token;
  int64_t timeout_ms = 60000;  // a shard that does not answer a request within this fails it
  int64_t connect_timeout_ms = 30000;
  uint64_t max_reply_bytes = uint64_t(1) << 31;
};

class PsClient {
 public:
  PsClient(const ClientOptions& opts, int num_shards);
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // Connects (or reconnects) to a shard and runs the handshake; blocking, bounded by timeout_ms
  // (<= 0: connect_timeout_ms). Requests in flight on a replaced connection fail (retryable).
  void connect(int shard, const std::string& host, int port, int64_t timeout_ms = 0);
  bool connected(int shard);
  std::string link_error(int shard);  // why the shard's connection went down ("" when up)
  uint64_t incarnation(int shard);
  int num_shards() const { return num_shards_; }
  const ClientOptions& options() const { return opts_; }

  // Blocking catalog calls. create_table places the table (shard 0) and creates its parts on
  // the shards; init (numel floats, may be null) seeds a new dense table. Idempotent.
  TableLayout create_table(const TableSpec& spec, const float* init, int64_t init_numel);
  TableLayout lookup_table(const std::string& name);
  std::vector<TableLayout> list_tables();  // every table in the catalog (shard 0), by name
  // Removes the table from every shard; using the name fails until a worker creates it again.
  // Throws TableNotFound when no shard held it.
  void drop_table(const std::string& name);
  // Replies: the table's consistency state on each shard holding a part, as JSON.
  std::shared_ptr<Work> table_status(const std::string& name);

  std::shared_ptr<Work> push(const std::string& name, const float* grad, int64_t n);
  std::shared_ptr<Work> pull(const std::string& name, float* out, int64_t n);
  std::shared_ptr<Work> push_pull(const std::string& name, const float* grad, float* out,
                                  int64_t n);
  std::shared_ptr<Work> assign(const std::string& name, const float* values, int64_t n);
  // n ids; grads/out hold n rows of the table's dim.
  std::shared_ptr<Work> push_sparse(const std::string& name, const int64_t* ids, const float* grads,
                                    int64_t n);
  std::shared_ptr<Work> pull_sparse(const std::string& name, const int64_t* ids, float* out,
                                    int64_t n);
  // push_sparse then the rows after the update, in one round trip.
  std::shared_ptr<Work> push_pull_sparse(const std::string& name, const int64_t* ids,
                                         const float* grads, float* out, int64_t n);
  std::shared_ptr<Work> worker_done();
  std::shared_ptr<Work> global_step(int64_t delta);  // reply: the counter after adding delta
  std::shared_ptr<Work> save(const std::string& dir);
  std::shared_ptr<Work> load(const std::string& dir);
  std::shared_ptr<Work> stats();           // replies: one JSON object per shard
  std::shared_ptr<Work> stats(int shard);  // one shard's JSON (the others may be down)
  std::shared_ptr<Work> ping(int shard);
  // A work that completes when all of `works` have (many tables in one round trip).
  static std::shared_ptr<Work> combine(const std::vector<std::shared_ptr<Work>>& works);
  // Re-sends the sub-requests of `work` that failed with network errors (after reconnecting).
  void retry(const std::shared_ptr<Work>& work);
  // This worker's step for a table (sync: the open round; ssp: pushes done).
  int64_t table_step(const std::string& name);
  // The pinned host blocks the client's CUDA buffers are staged through (gpu/staging.h).
  gpu::PinnedPool& staging_pool() { return staging_pool_; }

 private:
  struct TableState {
    TableLayout layout;
    int64_t step = 0;
    std::vector<uint64_t> incarnations;  // each shard's, when the table was created or found
    bool missing = false;  // a shard did not hold it: look the layout up again before use
  };
  TableState& table_state(const std::string& name);  // caller holds state_mu_
  std::string ask_catalog(MsgType type, ByteBuffer body, const std::string& what);
  int64_t join_parts(const TableLayout& layout, const float* init, const std::string& what);
  std::function<void(SubRequest&)> push_reply_handler(const std::string& name, Consistency mode);
  TableLayout layout_of(const std::string& name);
  void remember(const TableLayout& layout, int64_t step);
  // The error for a request a shard answered "no such table": names the table and the shard,
  // says when the shard restarted since, and marks the table's layout for a new lookup.
  std::exception_ptr missing_table_error(const SubRequest& s);
  std::string missing_table_message(const SubRequest& s);
  std::shared_ptr<SubRequest> make_sub(int shard, uint8_t type, uint32_t tag, std::string what);
  std::shared_ptr<Work> dense_op(const std::string& name, uint8_t type, const float* grad,
                                 float* out, int64_t n);
  std::shared_ptr<Work> sparse_push_op(const std::string& name, const int64_t* ids,
                                       const float* grads, float* out, int64_t n);
  std::shared_ptr<Work> broadcast(uint8_t type, const std::string& what, const ByteBuffer& body,
                                  bool variable_reply);
  std::shared_ptr<Work> run_blocking(const std::shared_ptr<Work>& w);
  void submit(const std::shared_ptr<Work>& w, std::vector<std::shared_ptr<SubRequest>> subs);
  float clip_factor(const TableSpec& spec, const float* g, int64_t n) const;

  // I/O thread (the event loop's)
  void on_link_event(int shard, const ClientLink* link, uint32_t events);
  void check_deadlines_at(Clock::time_point at);
  void close_all();
  void install_pending();
  void fail_link(int shard, const std::string& why, bool timed_out);
  void finish(const std::shared_ptr<SubRequest>& s);
  void fail_sub(const std::shared_ptr<SubRequest>& s, std::exception_ptr e, bool retryable);
  void fail_unconnected(const std::shared_ptr<SubRequest>& s);
  void update_interest(ClientLink& link);
  void wake();  // any thread: has the I/O thread install new links and pending requests

  ClientOptions opts_;
  int num_shards_;
  EventLoop events_;
  std::thread io_;

  std::mutex mu_;  // pending_, new_links_, link status
  std::vector<std::shared_ptr<SubRequest>> pending_;
  std::vector<std::unique_ptr<ClientLink>> new_links_;
  std::vector<uint8_t> link_up_;
  std::vector<std::string> link_error_;
  std::vector<uint64_t> incarnations_;
  std::vector<std::string> addresses_;

  // Guards links_, want_out_ and the links themselves: the I/O thread reads and flushes them,
  // and a caller submitting a request writes it to the socket itself (no thread hand-off).
  std::mutex links_mu_;
  std::vector<std::unique_ptr<ClientLink>> links_;
  std::vector<bool> want_out_;

  std::mutex state_mu_;
  std::unordered_map<std::string, TableState> tables_;
  // Push sequence numbers: one increasing counter for all tables (so each table's pushes carry
  // increasing numbers, across re-lookups and checkpoint loads too).
  std::atomic<uint64_t> next_seq_;
  gpu::PinnedPool staging_pool_;
};

}  // namespace pscore::ps
