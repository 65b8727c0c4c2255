// Per-table consistency bookkeeping on one shard: exactly-once admission of pushes by
// (worker, sequence number), BSP rounds with backup workers (sync), worker clocks with a
// staleness bound (ssp), and workers that finished. Pure state; the owning table locks it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ps/storage/seq_window.h"
#include "ps/wire/byte_buffer.h"
#include "ps/wire/table_spec.h"

namespace pscore::ps {

// How the server answered a push.
enum class PushStatus : uint8_t { kApplied = 0, kDuplicate = 1, kDropped = 2 };

// Sends a push's reply; `body` is the encoded reply (status, progress, optional values).
using ReplyFn = std::function<void(ByteBuffer&& body)>;

// What a push's reply carries after its status: nothing, the dense part's values (push_pull),
// or the rows of the pushed sparse ids (push_pull_sparse), read when the reply is sent.
struct ReplyValues {
  bool want = false;
  std::vector<int64_t> ids;
};

// A push whose reply waits for a sync round to close or for the slowest worker to catch up.
struct Waiter {
  int worker = 0;
  uint64_t seq = 0;
  ReplyValues values;
  ReplyFn reply;
  int64_t parked_us = 0;  // when it was parked (now_us), for stall reports
};

class ConsistencyState {
 public:
  ConsistencyState(const ConsistencySpec& spec, int num_workers);

  enum class Admission { kNew, kDuplicate, kPendingInRound };
  // Classifies a push by its sequence number: new, already applied/dropped, or already counted
  // in the open sync round (a retry whose first copy is still waiting).
  Admission admit(int worker, uint64_t seq) const;
  void mark_seq(int worker, uint64_t seq);
  const SeqWindow& seqs(int worker) const { return seqs_[worker]; }

  // --- sync (BSP) ---
  int64_t round() const { return round_; }
  bool is_late(int64_t step) const { return step < round_; }
  bool contributed(int worker) const { return contributed_[worker] != 0; }
  int contributors() const { return num_contributors_; }
  // Counts worker's push for the open round and parks its reply.
  void add_contribution(Waiter w);
  // Replaces the parked reply of a retried push (the original connection is gone).
  void replace_waiter(Waiter w);
  // Enough pushes for the open round: min(num_workers - backup_workers, active workers).
  bool round_ready() const;
  // Closes the round: marks the contributors' sequence numbers, advances the round and returns
  // the parked replies.
  std::vector<Waiter> close_round();
  // When the open round got its first push (now_us); 0 while it has none.
  int64_t round_opened_us() const { return round_opened_us_; }
  // Sequence numbers of the open round's contributors (for the write-ahead log).
  std::vector<std::pair<int, uint64_t>> round_seqs() const;

  // --- ssp ---
  int64_t clock(int worker) const { return clock_[worker]; }
  void advance_clock(int worker, int64_t clock);
  // True when worker is at most `staleness` steps ahead of the slowest active worker.
  bool may_proceed(int worker) const;
  void park(Waiter w);
  // The workers whose pushes wait behind the staleness bound, and since when the oldest does
  // (now_us; 0 when none waits): the first parked, as release_ready keeps their order.
  std::vector<int> parked_workers() const;
  int64_t oldest_parked_us() const {
    return ssp_waiters_.empty() ? 0 : ssp_waiters_.front().parked_us;
  }
  // Removes and returns the parked ssp replies whose workers may now proceed.
  std::vector<Waiter> release_ready();

  // --- all modes ---
  void set_done(int worker);
  bool done(int worker) const { return done_[worker] != 0; }
  int active_workers() const;
  // Resets the open round and hands back every parked reply (shutdown, checkpoint load).
  std::vector<Waiter> abandon_waiters();

  // Restores state recorded by a checkpoint: per worker the highest sequence number applied and
  // its window (hex; empty: everything up to the highest counts as applied).
  void restore(int64_t round, const std::vector<uint64_t>& high_seqs,
               const std::vector<std::string>& windows, const std::vector<int64_t>& clock,
               const std::vector<uint8_t>& done);
  const std::vector<SeqWindow>& all_seqs() const { return seqs_; }
  const std::vector<int64_t>& all_clocks() const { return clock_; }
  const std::vector<uint8_t>& all_done() const { return done_; }
  void set_round(int64_t r) { round_ = r; }
  const ConsistencySpec& spec() const { return spec_; }

 private:
  int64_t min_active_clock() const;

  ConsistencySpec spec_;
  int num_workers_;
  std::vector<SeqWindow> seqs_;
  std::vector<uint8_t> done_;
  int64_t round_ = 0;
  std::vector<uint8_t> contributed_;
  std::vector<uint64_t> pending_seq_;
  int num_contributors_ = 0;
  int64_t round_opened_us_ = 0;
  std::vector<Waiter> round_waiters_;
  std::vector<int64_t> clock_;
  std::vector<Waiter> ssp_waiters_;
};

}  // namespace pscore::ps
