#include "ps/storage/consistency.h"

#include <algorithm>
#include <limits>

#include "common/clock.h"

namespace pscore::ps {

ConsistencyState::ConsistencyState(const ConsistencySpec& spec, int num_workers)
    : spec_(spec),
      num_workers_(num_workers),
      seqs_(num_workers),
      done_(num_workers, 0),
      contributed_(num_workers, 0),
      pending_seq_(num_workers, 0),
      clock_(num_workers, 0) {}

ConsistencyState::Admission ConsistencyState::admit(int worker, uint64_t seq) const {
  if (contributed_[worker] && pending_seq_[worker] == seq) return Admission::kPendingInRound;
  if (seqs_[worker].contains(seq)) return Admission::kDuplicate;
  return Admission::kNew;
}

void ConsistencyState::mark_seq(int worker, uint64_t seq) { seqs_[worker].insert(seq); }

void ConsistencyState::add_contribution(Waiter w) {
  contributed_[w.worker] = 1;
  pending_seq_[w.worker] = w.seq;
  if (num_contributors_++ == 0) round_opened_us_ = now_us();
  round_waiters_.push_back(std::move(w));
}

void ConsistencyState::replace_waiter(Waiter w) {
  for (Waiter& old : round_waiters_) {
    if (old.worker == w.worker) {
      old = std::move(w);
      return;
    }
  }
  round_waiters_.push_back(std::move(w));
}

int ConsistencyState::active_workers() const {
  int n = 0;
  for (uint8_t d : done_) n += d ? 0 : 1;
  return n;
}

bool ConsistencyState::round_ready() const {
  if (num_contributors_ == 0) return false;
  int required = std::min(num_workers_ - spec_.backup_workers, active_workers());
  return num_contributors_ >= std::max(1, required);
}

std::vector<std::pair<int, uint64_t>> ConsistencyState::round_seqs() const {
  std::vector<std::pair<int, uint64_t>> out;
  for (int w = 0; w < num_workers_; ++w)
    if (contributed_[w]) out.emplace_back(w, pending_seq_[w]);
  return out;
}

std::vector<Waiter> ConsistencyState::close_round() {
  for (int w = 0; w < num_workers_; ++w) {
    if (contributed_[w]) mark_seq(w, pending_seq_[w]);
    contributed_[w] = 0;
    pending_seq_[w] = 0;
  }
  num_contributors_ = 0;
  round_opened_us_ = 0;
  ++round_;
  std::vector<Waiter> out;
  out.swap(round_waiters_);
  return out;
}

void ConsistencyState::advance_clock(int worker, int64_t clock) {
  clock_[worker] = std::max(clock_[worker], clock);
}

int64_t ConsistencyState::min_active_clock() const {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (int w = 0; w < num_workers_; ++w)
    if (!done_[w]) m = std::min(m, clock_[w]);
  return m;
}

bool ConsistencyState::may_proceed(int worker) const {
  int64_t slowest = min_active_clock();
  if (slowest == std::numeric_limits<int64_t>::max()) return true;
  return clock_[worker] - slowest <= spec_.staleness;
}

void ConsistencyState::park(Waiter w) {
  w.parked_us = now_us();
  ssp_waiters_.push_back(std::move(w));
}

std::vector<int> ConsistencyState::parked_workers() const {
  std::vector<int> out;
  for (const Waiter& w : ssp_waiters_) out.push_back(w.worker);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<Waiter> ConsistencyState::release_ready() {
  std::vector<Waiter> ready, still;
  for (Waiter& w : ssp_waiters_) (may_proceed(w.worker) ? ready : still).push_back(std::move(w));
  ssp_waiters_.swap(still);
  return ready;
}

void ConsistencyState::set_done(int worker) { done_[worker] = 1; }

std::vector<Waiter> ConsistencyState::abandon_waiters() {
  std::vector<Waiter> parked = std::move(round_waiters_);
  for (Waiter& w : ssp_waiters_) parked.push_back(std::move(w));
  round_waiters_.clear();
  ssp_waiters_.clear();
  std::fill(contributed_.begin(), contributed_.end(), 0);
  std::fill(pending_seq_.begin(), pending_seq_.end(), 0);
  num_contributors_ = 0;
  round_opened_us_ = 0;
  return parked;
}

void ConsistencyState::restore(int64_t round, const std::vector<uint64_t>& high_seqs,
                               const std::vector<std::string>& windows,
                               const std::vector<int64_t>& clock,
                               const std::vector<uint8_t>& done) {
  abandon_waiters();
  round_ = round;
  for (int w = 0; w < num_workers_; ++w) {
    const size_t i = static_cast<size_t>(w);
    seqs_[i].restore(i < high_seqs.size() ? high_seqs[i] : 0,
                     i < windows.size() ? windows[i] : std::string());
    clock_[i] = i < clock.size() ? clock[i] : 0;
    done_[i] = i < done.size() ? done[i] : 0;
  }
}

}  // namespace pscore::ps
