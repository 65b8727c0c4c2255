// OpProgress: what a process group's collective lane is running, written by that lane with
// relaxed atomics and read from any thread by the stall inspector and the SIGUSR1 dump.
#pragma once

#include <atomic>
#include <cstdint>

#include "collectives/exchange.h"

namespace pscore {

// One consistent-enough reading of an OpProgress (fields may be a moment apart).
struct OpSnapshot {
  uint64_t entered = 0;  // collectives started so far: the running (or last) one's seq + 1
  bool running = false;
  OpKind kind = OpKind::kAllreduce;
  DType dtype = DType::kUInt8;
  uint64_t nbytes = 0;
  int64_t elapsed_us = 0;  // since the running one started (to a coarse clock tick)
  int waiting_on = -1;     // the peer it last slept on; -1 before it slept
};

class OpProgress {
 public:
  // The lane starts ctx (its seq, kind, dtype and nbytes); a few relaxed stores.
  void begin(const OpContext& ctx);
  void end() { running_.store(false, std::memory_order_release); }
  // Where Exchange records the peer it sleeps on (OpContext::waiting_on).
  std::atomic<int>* waiting_on() { return &waiting_on_; }
  OpSnapshot snapshot() const;

 private:
  std::atomic<uint64_t> entered_{0};
  std::atomic<bool> running_{false};
  // Before the first collective a snapshot reads OpSnapshot's defaults, valid enum values.
  std::atomic<uint8_t> kind_{static_cast<uint8_t>(OpKind::kAllreduce)};
  std::atomic<uint8_t> dtype_{static_cast<uint8_t>(DType::kUInt8)};
  std::atomic<uint64_t> nbytes_{0};
  std::atomic<int64_t> started_us_{0};
  std::atomic<int> waiting_on_{-1};
};

}  // namespace pscore
