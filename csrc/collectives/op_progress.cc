#include "collectives/op_progress.h"

namespace pscore {

void OpProgress::begin(const OpContext& ctx) {
  constexpr auto relaxed = std::memory_order_relaxed;
  kind_.store(static_cast<uint8_t>(ctx.kind), relaxed);
  dtype_.store(static_cast<uint8_t>(ctx.dtype), relaxed);
  nbytes_.store(ctx.nbytes, relaxed);
  started_us_.store(coarse_now_us(), relaxed);
  waiting_on_.store(-1, relaxed);
  running_.store(true, relaxed);
  entered_.store(ctx.seq + 1, std::memory_order_release);
}

OpSnapshot OpProgress::snapshot() const {
  constexpr auto relaxed = std::memory_order_relaxed;
  OpSnapshot s;
  s.entered = entered_.load(std::memory_order_acquire);
  s.running = running_.load(std::memory_order_acquire);
  s.kind = static_cast<OpKind>(kind_.load(relaxed));
  s.dtype = static_cast<DType>(dtype_.load(relaxed));
  s.nbytes = nbytes_.load(relaxed);
  s.elapsed_us = s.running ? coarse_now_us() - started_us_.load(relaxed) : 0;
  s.waiting_on = waiting_on_.load(relaxed);
  return s;
}

}  // namespace pscore
