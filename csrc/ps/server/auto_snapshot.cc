#include "ps/server/auto_snapshot.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/error.h"

namespace pscore::ps {

uint64_t SnapshotPolicy::due_bytes(uint64_t snapshot_bytes) const {
  if (log_min_bytes == 0) return 0;
  const double relative = log_ratio * static_cast<double>(snapshot_bytes);
  return std::max<uint64_t>(log_min_bytes, static_cast<uint64_t>(relative));
}

AutoSnapshot::AutoSnapshot(ShardState& shard, const SnapshotPolicy& policy)
    : shard_(shard), policy_(policy) {
  if (policy.log_ratio < 0)
    throw std::invalid_argument("snapshot log ratio must be >= 0, got " +
                                std::to_string(policy.log_ratio));
  if (policy.every_ms < 0)
    throw std::invalid_argument("snapshot period must be >= 0 ms, got " +
                                std::to_string(policy.every_ms));
}

AutoSnapshot::~AutoSnapshot() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  finished_.notify_all();
  if (thread_.joinable()) thread_.join();  // the shard outlives no snapshot of it
}

void AutoSnapshot::start() {
  if (!shard_.logging() || (policy_.every_ms == 0 && policy_.log_min_bytes == 0)) return;
  thread_ = std::thread([this] { run(); });
}

void AutoSnapshot::admit() {
  if (!thread_.joinable()) return;
  const uint64_t due = policy_.due_bytes(shard_.snapshot_bytes());
  const uint64_t bytes = shard_.log_bytes();
  if (due == 0 || bytes < due) return;
  std::unique_lock<std::mutex> lk(mu_);
  if (!due_) {
    due_ = true;
    wake_.notify_one();
  }
  if (bytes < 2 * due || failed_) return;
  const uint64_t attempt = attempts_;
  finished_.wait(lk, [&] { return stop_ || attempts_ != attempt; });
}

void AutoSnapshot::stop() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    stop_ = true;
    wake_.notify_all();
    finished_.notify_all();
    const auto limit = std::chrono::milliseconds(policy_.stop_timeout_ms);
    if (!finished_.wait_for(lk, limit, [&] { return !writing_; }))
      throw TimeoutError("shard " + std::to_string(shard_.options().shard) +
                         ": the snapshot into " + shard_.options().recover_dir +
                         " is still being written after " +
                         std::to_string(policy_.stop_timeout_ms) +
                         " ms (is the disk stuck?); the server is stopped, but that directory "
                         "may still change");
  }
  if (thread_.joinable()) thread_.join();
}

bool AutoSnapshot::writing() const {
  std::lock_guard<std::mutex> lk(mu_);
  return writing_;
}

uint64_t AutoSnapshot::snapshots_written() const {
  std::lock_guard<std::mutex> lk(mu_);
  return written_;
}

// Waits until a snapshot is due by size (admit() says so) or by time (the period has passed
// and the log holds records), writes it with the lock released, then lets waiting requests go.
// A failed snapshot is retried after a second at the earliest.
void AutoSnapshot::run() {
  using Clock = std::chrono::steady_clock;
  const auto period = std::chrono::milliseconds(policy_.every_ms);
  auto last = Clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    auto ready = [&] { return stop_ || due_; };
    if (policy_.every_ms > 0)
      wake_.wait_until(lk, last + period, ready);
    else
      wake_.wait(lk, ready);
    if (stop_) break;
    const bool by_time = policy_.every_ms > 0 && Clock::now() >= last + period;
    if (!due_ && !(by_time && shard_.log_bytes() > 0)) {
      last = Clock::now();
      continue;
    }
    due_ = false;
    writing_ = true;
    lk.unlock();
    const bool ok = snapshot();
    lk.lock();
    writing_ = false;
    last = Clock::now();
    failed_ = !ok;
    ++attempts_;
    written_ += ok ? 1 : 0;
    finished_.notify_all();
    if (!ok) wake_.wait_for(lk, std::chrono::seconds(1), [&] { return stop_; });
  }
}

bool AutoSnapshot::snapshot() {
  try {
    shard_.save(shard_.options().recover_dir);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[pscore.ps shard %d] automatic snapshot into %s failed: %s\n",
                 shard_.options().shard, shard_.options().recover_dir.c_str(), e.what());
    return false;
  }
}

}  // namespace pscore::ps
