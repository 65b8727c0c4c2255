// Executes one request frame against a shard's state and sends its reply (now, or later for a
// push parked by a sync round or the ssp bound). Runs on pool threads, never holding the GIL.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "ps/server/server_connection.h"
#include "ps/server/server_stats.h"
#include "ps/server/shard_state.h"

namespace pscore::ps {

class RequestHandler {
 public:
  RequestHandler(ShardState& shard, ServerStats& stats) : shard_(shard), stats_(stats) {}
  // Never throws: failures become error replies (the connection stays open).
  void handle(const std::shared_ptr<ServerConnection>& conn, InFrame&& frame);
  // Produces the kStats reply (the server's counters as JSON).
  std::function<std::string()> stats_json;
  // Runs before each request that appends to the log, with no lock held (may block:
  // AutoSnapshot::admit).
  std::function<void()> before_request;
  // Sends the replies that table operations produced, and empties `out`.
  static void send_all(ReplyOutbox& out);

 private:
  void dispatch(const std::shared_ptr<ServerConnection>& conn, InFrame& f);
  void push_dense(const std::shared_ptr<ServerConnection>& conn, InFrame& f, bool want_values);
  void push_sparse(const std::shared_ptr<ServerConnection>& conn, InFrame& f, bool want_rows);
  ReplyFn reply_fn(const std::shared_ptr<ServerConnection>& conn, const InFrame& f);
  void reply(const std::shared_ptr<ServerConnection>& conn, const InFrame& f, ByteBuffer&& body);
  ShardState& shard_;
  ServerStats& stats_;
};

// Sends an error reply {code, message} for request f.
void send_error(ServerConnection& conn, const FrameHeader& request, uint32_t code,
                const std::string& message);

}  // namespace pscore::ps
