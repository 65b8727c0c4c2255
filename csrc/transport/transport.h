// The transport interface collectives are written against: channels to every peer on a few lanes,
// a way to sleep until one may progress, and liveness of peers. TCP and shared memory implement it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/channel.h"

namespace pscore {

// Lanes separate independent streams between the same pair of ranks.
enum Lane : int { kCollectiveLane = 0, kP2PLane = 1, kNumLanes = 2 };

struct WaitItem {
  int peer;
  int lane;
  bool want_write;  // else want_read
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Channel& channel(int peer, int lane) = 0;
  // Whether each step of an exchange costs system calls and the peer's wake-up (sockets), so
  // that algorithms with fewer steps pay at the same bytes.
  virtual bool costly_steps() const { return false; }
  // Exchanges moving an item of at least this many bytes sleep whenever they wait instead of
  // polling first: a socket polled while a large payload trickles in is read and written a few
  // KB a system call, where a rank that sleeps wakes to hundreds of KB.
  virtual size_t polled_item_limit() const { return SIZE_MAX; }
  // Whether payloads of nbytes of this kind travel as addresses by their size alone
  // (Channel::single_copy says so where the receiver may read this rank's memory); every rank
  // with the same options answers alike.
  virtual bool sends_by_address(size_t nbytes, Payload payload) const {
    (void)nbytes, (void)payload;
    return false;
  }

  // Sleeping protocol: begin_wait() announces a sleeper and returns a token (then the caller
  // re-checks its channels); wait() blocks until a peer signals after the token was taken, or
  // timeout_ms passes; end_wait() withdraws the announcement. Thread-safe.
  virtual uint32_t begin_wait() { return 0; }
  virtual void wait(const std::vector<WaitItem>& items, int timeout_ms, uint32_t token) = 0;
  virtual void end_wait() {}

  // Throws NetworkError naming the peer when it is known to have died or aborted the group.
  virtual void check_peer(int peer) = 0;
  // Tells every peer this rank is leaving the group because of `reason`; idempotent.
  virtual void abort(const std::string& reason) = 0;
};

// One turn of the sleeping protocol: announces the sleeper on construction and withdraws it on
// destruction, also when the re-check in between throws.
class SleepTurn {
 public:
  explicit SleepTurn(Transport& t) : t_(t), token_(t.begin_wait()) {}
  ~SleepTurn() { t_.end_wait(); }
  SleepTurn(const SleepTurn&) = delete;
  SleepTurn& operator=(const SleepTurn&) = delete;
  void wait(const std::vector<WaitItem>& items, int timeout_ms) {
    t_.wait(items, timeout_ms, token_);
  }

 private:
  Transport& t_;
  uint32_t token_;
};

}  // namespace pscore
