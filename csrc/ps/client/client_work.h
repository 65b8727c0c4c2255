// Work handles of the ps client: a request is split into one sub-request per shard; the work
// completes when every sub-request has its reply. Failures are kept per shard so that the caller
// can reconnect a restarted shard and retry() just the failed parts with their original sequence
// numbers (the server applies a retried push at most once).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/frame.h"
#include "common/work.h"
#include "ps/wire/byte_buffer.h"

namespace pscore::ps {

class Work;

// One frame to one shard and where its reply goes.
struct SubRequest {
  int shard = 0;
  FrameHeader header;  // seq (the request id) is set when it is sent
  ByteBuffer prefix;   // owned leading payload (push header, counts, gathered ids)
  std::vector<std::pair<const void*, size_t>> parts;  // caller memory sent after the prefix
  // Reply: reply_prefix_bytes go to `reply` (parsed on completion), then direct_bytes straight
  // into caller memory: `direct`, or when `scatter` is set, its segments in order (the rows of
  // a sparse pull land at their places in the caller's array).
  size_t reply_prefix_bytes = 0;
  bool variable_reply = false;  // the whole reply, of any length, goes to `reply`
  uint8_t* direct = nullptr;
  size_t direct_bytes = 0;
  std::vector<std::pair<uint8_t*, size_t>> scatter;
  ByteBuffer reply;
  ByteBuffer scratch;
  // Runs on the I/O thread after a successful reply (scatter rows, record progress). Throws to
  // fail the sub-request.
  std::function<void(SubRequest&)> on_reply;
  std::string what;  // "push 'w'" for errors
  int64_t deadline_us = 0;
  // I/O-thread state
  bool done = false;
  bool sending = false;  // handed to a link and not yet answered
  std::exception_ptr error;
  bool retryable_error = false;
  std::string table_missing;  // the shard's message when it does not hold the table
  std::weak_ptr<Work> owner;
};

// A request's Work (common/work.h): done when every sub-request (and every child) is; its
// failure is the first sub-request's, reported once all have finished.
class Work : public pscore::Work, public std::enable_shared_from_this<Work> {
 public:
  explicit Work(std::string what) : pscore::Work(std::move(what)) {}
  bool wait(int64_t timeout_ms = -1) override;
  bool is_completed() override;
  std::exception_ptr exception() override;
  // Shards whose sub-requests failed with a network or timeout error (retry candidates).
  std::vector<int> failed_shards();
  // Shards whose sub-requests have not finished yet (what the request still waits on).
  std::vector<int> pending_shards();
  bool retryable() const { return retryable_; }
  void set_retryable(bool r) { retryable_ = r; }
  // Results for pushes: the largest progress and the count per reply status.
  int64_t progress();
  std::vector<int64_t> status_counts();
  // Each sub-request's reply bytes in sub-request order (create/lookup/stats); valid after
  // completion.
  std::vector<std::string> replies();

  // --- client internals ---
  std::vector<std::shared_ptr<SubRequest>> subs;
  std::vector<std::shared_ptr<Work>> children;  // a combined work waits for these too
  void finish_sub(SubRequest& s);               // I/O thread: a sub-request got its reply or failed
  void note_push(uint8_t status, int64_t progress);
  // Resets failed sub-requests for resending; returns them.
  std::vector<std::shared_ptr<SubRequest>> take_failed();

 private:
  bool complete_locked() const;
  std::vector<int> shards_where(bool (*pick)(const SubRequest&));
  bool retryable_ = true;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t finished_ = 0;
  int64_t progress_ = 0;
  std::vector<int64_t> status_counts_ = std::vector<int64_t>(3, 0);
};

}  // namespace pscore::ps
