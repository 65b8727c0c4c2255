#include "ps/storage/server_table.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "ps/storage/initializer.h"
#include "ps/storage/optimizer.h"

namespace pscore::ps {
namespace {

struct SeqUpdate {
  int32_t worker;
  uint64_t seq;
  int64_t clock;
};

bool stateless_sgd(const OptimizerSpec& o) {
  return o.kind == OptimizerKind::kSgd && o.momentum == 0 && o.weight_decay == 0;
}

}  // namespace

ServerTable::ServerTable(const TableLayout& layout, int shard, int num_shards, int num_workers,
                         UpdateLog* log)
    : layout_(layout),
      shard_(shard),
      num_workers_(num_workers),
      log_(log),
      sparse_acc_(layout.spec.kind == TableKind::kSparse ? layout.spec.dim() : 1),
      cons_(layout.spec.consistency, num_workers) {
  const TableSpec& s = layout_.spec;
  if (s.kind == TableKind::kSparse) {
    sparse_ = std::make_unique<SparseStore>(s.dim(), s.optimizer, s.init, s.max_rows_per_shard);
    if (s.capacity > 0 && shard >= 0) {  // this shard's share, with room for uneven hashing
      int64_t shards = std::max<int64_t>(1, num_shards);
      try {
        sparse_->reserve(s.capacity / shards + s.capacity / shards / 16 + 1024);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("table '" + s.name + "': capacity " +
                                    std::to_string(s.capacity) + ": " + e.what());
      }
    }
    return;
  }
  part_.shard = shard;
  for (const DensePart& p : layout_.parts)
    if (p.shard == shard) part_ = p;
  values_.resize(static_cast<size_t>(part_.numel));
  fill_initial_values(s.init, 0, part_.offset, values_.data(), part_.numel);
  state_.resize(static_cast<size_t>(part_.numel * s.optimizer.num_slots()));
  init_optimizer_state(s.optimizer, state_.data(), part_.numel);
}

int64_t ServerTable::num_rows() const { return sparse_ ? sparse_->num_rows() : 0; }

void check_worker_id(int worker, int num_workers, const std::string& what) {
  if (worker == -1)
    throw std::invalid_argument(what +
                                ": this client is read-only (worker id -1, an observer such as "
                                "TF's ps and evaluator tasks); only workers push");
  if (worker < 0 || worker >= num_workers)
    throw std::invalid_argument(what + ": worker id " + std::to_string(worker) +
                                " is outside [0, " + std::to_string(num_workers) + ")");
}

void ServerTable::validate_worker(int worker) const {
  check_worker_id(worker, num_workers_, "table '" + spec().name + "'");
}

int64_t ServerTable::progress_for(int worker) const {
  switch (spec().consistency.mode) {
    case Consistency::kSync:
      return cons_.round();
    case Consistency::kSsp:
      return cons_.clock(worker);
    case Consistency::kAsync:
      break;
  }
  return dense_step_;
}

ByteBuffer ServerTable::push_reply(PushStatus status, int64_t progress, const ReplyValues& want) {
  PushReply r;
  r.status = static_cast<uint8_t>(status);
  r.progress = progress;
  if (!want.want) {
    ByteBuffer body(sizeof(r));
    std::memcpy(body.data(), &r, sizeof(r));
    return body;
  }
  if (dense()) {
    const size_t extra = values_.size() * sizeof(float);
    ByteBuffer body(sizeof(r) + extra);
    std::memcpy(body.data(), &r, sizeof(r));
    std::memcpy(body.data() + sizeof(r), values_.data(), extra);
    return body;
  }
  const int64_t n = static_cast<int64_t>(want.ids.size()), dim = sparse_->dim();
  ByteBuffer body(sizeof(r) + static_cast<size_t>(n * dim) * sizeof(float));
  std::memcpy(body.data(), &r, sizeof(r));
  copy_rows(n, want.ids.data(), reinterpret_cast<float*>(body.data() + sizeof(r)));
  return body;
}

bool ServerTable::handle_repeat(const PushHeader& h, ReplyValues& want, ReplyFn& reply,
                                ReplyOutbox& out) {
  auto admission = cons_.admit(h.worker, h.seq);
  if (admission == ConsistencyState::Admission::kNew) return false;
  Waiter w{h.worker, h.seq, std::move(want), std::move(reply)};
  if (admission == ConsistencyState::Admission::kPendingInRound) {
    cons_.replace_waiter(std::move(w));
    return true;
  }
  if (spec().consistency.mode == Consistency::kSsp && !cons_.may_proceed(h.worker)) {
    cons_.park(std::move(w));
    return true;
  }
  out.emplace_back(std::move(w.reply),
                   push_reply(PushStatus::kDuplicate, progress_for(h.worker), w.values));
  return true;
}

void ServerTable::log_apply(LogKind kind, const std::vector<std::pair<int, uint64_t>>& seqs,
                            int64_t round, int64_t n_ids, const int64_t* ids, const float* grads,
                            int64_t n_floats) {
  if (!log_) return;
  std::vector<SeqUpdate> updates;
  for (const auto& [w, s] : seqs) updates.push_back({w, s, cons_.clock(w)});
  uint32_t table = id();
  uint32_t n_updates = static_cast<uint32_t>(updates.size());
  uint64_t n_id = static_cast<uint64_t>(n_ids), n_fl = static_cast<uint64_t>(n_floats);
  log_->append(kind, {{&table, 4},
                      {&n_updates, 4},
                      {updates.data(), updates.size() * sizeof(SeqUpdate)},
                      {&round, 8},
                      {&n_id, 8},
                      {ids, n_id * 8},
                      {&n_fl, 8},
                      {grads, n_fl * 4}});
}

void ServerTable::apply_dense(const float* grad) {
  ++dense_step_;
  apply_optimizer(spec().optimizer, values_.data(), grad, state_.data(), part_.numel, dense_step_);
}

void ServerTable::apply_dense_into(const float* grad, float* out) {
  ++dense_step_;
  constexpr int64_t kSlice = 16 * 1024;  // 64 KB of values
  const int64_t n = part_.numel;
  float* state = state_.data();  // null for a stateless optimizer (SGD without momentum)
  for (int64_t at = 0; at < n; at += kSlice) {
    const int64_t len = std::min(kSlice, n - at);
    apply_optimizer(spec().optimizer, values_.data() + at, grad + at,
                    state == nullptr ? nullptr : state + at, len, dense_step_, n);
    std::memcpy(out + at, values_.data() + at, static_cast<size_t>(len) * sizeof(float));
  }
}

void ServerTable::apply_sparse(int64_t n, const int64_t* ids, const float* grads) {
  const int64_t dim = sparse_->dim();
  const OptimizerSpec& opt = spec().optimizer;
  rows_.resize(static_cast<size_t>(n));
  sparse_->find_or_create_batch(ids, n, rows_.data());
  constexpr int64_t kAhead = 4;
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) sparse_->prefetch(rows_[i + kAhead]);
    const uint32_t row = rows_[i];
    int64_t& step = sparse_->step(row);
    ++step;
    apply_optimizer(opt, sparse_->values(row), grads + i * dim, sparse_->state(row), dim, step);
  }
}

void ServerTable::finish_push(const PushHeader& h, ReplyValues want, ReplyFn reply,
                              ReplyOutbox& out) {
  if (spec().consistency.mode == Consistency::kSsp) {
    if (!cons_.may_proceed(h.worker)) {
      cons_.park(Waiter{h.worker, h.seq, std::move(want), std::move(reply)});
    } else {
      out.emplace_back(std::move(reply),
                       push_reply(PushStatus::kApplied, progress_for(h.worker), want));
    }
    release_ssp(out);
    return;
  }
  out.emplace_back(std::move(reply),
                   push_reply(PushStatus::kApplied, progress_for(h.worker), want));
}

void ServerTable::release_ssp(ReplyOutbox& out) {
  for (Waiter& w : cons_.release_ready())
    out.emplace_back(std::move(w.reply),
                     push_reply(PushStatus::kApplied, cons_.clock(w.worker), w.values));
}

void ServerTable::close_round(ReplyOutbox& out) {
  const float inv = 1.0f / static_cast<float>(cons_.contributors());
  auto seqs = cons_.round_seqs();
  const int64_t next_round = cons_.round() + 1;
  if (dense()) {
    scale_in_place(acc_.data(), part_.numel, inv);
    log_apply(LogKind::kApplyDense, seqs, next_round, 0, nullptr, acc_.data(), part_.numel);
    apply_dense(acc_.data());
  } else {
    sparse_acc_.scale(inv);
    log_apply(LogKind::kApplySparse, seqs, next_round, sparse_acc_.size(), sparse_acc_.ids(),
              sparse_acc_.grads(), sparse_acc_.size() * sparse_->dim());
    apply_sparse(sparse_acc_.size(), sparse_acc_.ids(), sparse_acc_.grads());
    sparse_acc_.clear();
  }
  for (Waiter& w : cons_.close_round())
    out.emplace_back(std::move(w.reply), push_reply(PushStatus::kApplied, cons_.round(), w.values));
}

// A sync push for a round that has closed (a backup worker's straggler) is acknowledged as
// dropped, and its sequence number remembered so a retry is not applied later.
bool ServerTable::drop_if_late(const PushHeader& h, ReplyValues& want, ReplyFn& reply,
                               ReplyOutbox& out) {
  if (!cons_.is_late(h.step)) return false;
  cons_.mark_seq(h.worker, h.seq);
  out.emplace_back(std::move(reply), push_reply(PushStatus::kDropped, cons_.round(), want));
  return true;
}

void ServerTable::push_dense(const PushHeader& h, const float* grad, bool want_values,
                             ReplyFn reply, ReplyOutbox& out) {
  validate_worker(h.worker);
  ReplyValues want{want_values, {}};
  std::lock_guard<std::mutex> lk(mu_);
  if (handle_repeat(h, want, reply, out)) return;
  const Consistency mode = spec().consistency.mode;
  if (mode == Consistency::kSync) {
    if (drop_if_late(h, want, reply, out)) return;
    if (cons_.contributors() == 0)
      acc_.assign(grad, grad + part_.numel);
    else
      add_in_place(acc_.data(), grad, part_.numel);
    cons_.add_contribution(Waiter{h.worker, h.seq, std::move(want), std::move(reply)});
    if (cons_.round_ready()) close_round(out);
    return;
  }
  if (mode == Consistency::kSsp) cons_.advance_clock(h.worker, h.step + 1);
  log_apply(LogKind::kApplyDense, {{h.worker, h.seq}}, cons_.round(), 0, nullptr, grad,
            part_.numel);
  cons_.mark_seq(h.worker, h.seq);
  if (mode == Consistency::kAsync && want.want) {  // the common push_pull: one pass
    PushReply r;
    r.progress = dense_step_ + 1;
    ByteBuffer body(sizeof(r) + values_.size() * sizeof(float));
    std::memcpy(body.data(), &r, sizeof(r));
    apply_dense_into(grad, reinterpret_cast<float*>(body.data() + sizeof(r)));
    out.emplace_back(std::move(reply), std::move(body));
    return;
  }
  apply_dense(grad);
  finish_push(h, std::move(want), std::move(reply), out);
}

void ServerTable::push_sparse(const PushHeader& h, int64_t n, const int64_t* ids,
                              const float* grads, bool want_rows, ReplyFn reply, ReplyOutbox& out) {
  validate_worker(h.worker);
  const int64_t dim = spec().dim();
  ReplyValues want;
  if (want_rows) {
    want.want = true;
    want.ids.assign(ids, ids + n);
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (handle_repeat(h, want, reply, out)) return;
  const Consistency mode = spec().consistency.mode;
  if (mode == Consistency::kSync) {
    if (drop_if_late(h, want, reply, out)) return;
    make_rows(n, ids, true);  // now, so the round's rows count against the limit before it closes
    sparse_acc_.add(n, ids, grads);
    cons_.add_contribution(Waiter{h.worker, h.seq, std::move(want), std::move(reply)});
    if (cons_.round_ready()) close_round(out);
    return;
  }
  // Before the update is logged: a push that does not fit changes nothing.
  make_rows(n, ids, false);
  if (mode == Consistency::kSsp) cons_.advance_clock(h.worker, h.step + 1);
  if (stateless_sgd(spec().optimizer)) {  // sequential updates equal the summed one
    log_apply(LogKind::kApplySparse, {{h.worker, h.seq}}, cons_.round(), n, ids, grads, n * dim);
    apply_sparse(n, ids, grads);
    if (mode == Consistency::kAsync && want.want) {  // reply from the rows just updated
      cons_.mark_seq(h.worker, h.seq);
      PushReply r;
      ByteBuffer body(sizeof(r) + static_cast<size_t>(n * dim) * sizeof(float));
      std::memcpy(body.data(), &r, sizeof(r));
      auto* dst = reinterpret_cast<float*>(body.data() + sizeof(r));
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(dst + i * dim, sparse_->values(rows_[i]), sizeof(float) * dim);
      out.emplace_back(std::move(reply), std::move(body));
      return;
    }
  } else {
    SparseAccumulator merged(dim);
    merged.add(n, ids, grads);
    log_apply(LogKind::kApplySparse, {{h.worker, h.seq}}, cons_.round(), merged.size(),
              merged.ids(), merged.grads(), merged.size() * dim);
    apply_sparse(merged.size(), merged.ids(), merged.grads());
  }
  cons_.mark_seq(h.worker, h.seq);
  finish_push(h, std::move(want), std::move(reply), out);
}

void ServerTable::pull_dense(float* out) {
  std::lock_guard<std::mutex> lk(mu_);
  std::memcpy(out, values_.data(), values_.size() * sizeof(float));
}

void ServerTable::make_rows(int64_t n, const int64_t* ids, bool create) {
  try {
    if (create) {
      rows_.resize(static_cast<size_t>(n));
      sparse_->find_or_create_batch(ids, n, rows_.data());
    } else {
      sparse_->check_room(ids, n);
    }
  } catch (const TableFull& e) {
    throw std::invalid_argument("sparse table '" + spec().name + "' on shard " +
                                std::to_string(shard_) + ": " + e.what() + "; nothing was written");
  }
}

void ServerTable::copy_rows(int64_t n, const int64_t* ids, float* out) {
  const int64_t dim = sparse_->dim();
  make_rows(n, ids, true);
  constexpr int64_t kAhead = 4;
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) sparse_->prefetch(rows_[i + kAhead]);
    std::memcpy(out + i * dim, sparse_->values(rows_[i]), sizeof(float) * dim);
  }
}

void ServerTable::pull_sparse(int64_t n, const int64_t* ids, float* out) {
  std::lock_guard<std::mutex> lk(mu_);
  copy_rows(n, ids, out);
}

void ServerTable::assign_dense(const float* values) {
  std::lock_guard<std::mutex> lk(mu_);
  if (log_) {
    uint32_t table = id();
    uint64_t n = static_cast<uint64_t>(part_.numel);
    log_->append(LogKind::kAssignDense, {{&table, 4}, {&n, 8}, {values, n * 4}});
  }
  std::memcpy(values_.data(), values, values_.size() * sizeof(float));
}

void ServerTable::worker_done(int worker, ReplyOutbox& out) {
  validate_worker(worker);
  std::lock_guard<std::mutex> lk(mu_);
  cons_.set_done(worker);
  if (spec().consistency.mode == Consistency::kSync && cons_.round_ready()) close_round(out);
  if (spec().consistency.mode == Consistency::kSsp) release_ssp(out);
}

int64_t ServerTable::step_for(int worker) {
  std::lock_guard<std::mutex> lk(mu_);
  switch (spec().consistency.mode) {
    case Consistency::kSync:
      return cons_.round();
    case Consistency::kSsp:
      return worker >= 0 && worker < num_workers_ ? cons_.clock(worker) : 0;
    case Consistency::kAsync:
      break;
  }
  return 0;
}

void ServerTable::abandon_waiters(ReplyOutbox& out) {
  std::lock_guard<std::mutex> lk(mu_);
  for (Waiter& w : cons_.abandon_waiters())
    out.emplace_back(std::move(w.reply), push_reply(PushStatus::kDropped, cons_.round(), w.values));
  sparse_acc_.clear();
}

void ServerTable::replay(LogKind kind, WireReader& r) {
  std::lock_guard<std::mutex> lk(mu_);
  if (kind == LogKind::kAssignDense) {
    uint64_t n = r.u64("value count");
    if (n != values_.size()) throw NetworkError("log: assign size mismatch");
    r.copy_to(values_.data(), n * 4, "values");
    return;
  }
  std::vector<SeqUpdate> updates = r.vector<SeqUpdate>(r.u32("update count"), "updates");
  int64_t round = r.i64("round");
  std::vector<int64_t> ids = r.vector<int64_t>(r.u64("id count"), "ids");
  std::vector<float> grads = r.vector<float>(r.u64("gradient count"), "gradients");
  const uint64_t n_ids = ids.size(), n_floats = grads.size();
  if (kind == LogKind::kApplyDense) {
    if (n_floats != values_.size()) throw NetworkError("log: dense gradient size mismatch");
    apply_dense(grads.data());
  } else {
    if (n_floats != n_ids * static_cast<uint64_t>(sparse_->dim()))
      throw NetworkError("log: sparse gradient size mismatch");
    apply_sparse(static_cast<int64_t>(n_ids), ids.data(), grads.data());
  }
  for (const SeqUpdate& u : updates) {
    if (u.worker < 0 || u.worker >= num_workers_) continue;
    cons_.mark_seq(u.worker, u.seq);
    cons_.advance_clock(u.worker, u.clock);
  }
  cons_.set_round(round);
}

}  // namespace pscore::ps
