// One table's share on one shard: its storage (a dense part or sparse rows), optimizer, and
// consistency state. Every method locks the table; replies that a push releases are returned in
// an outbox and sent by the caller after the lock is dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ps/durability/update_log.h"
#include "ps/storage/consistency.h"
#include "ps/storage/sparse_accumulator.h"
#include "ps/storage/sparse_store.h"
#include "ps/wire/ps_protocol.h"
#include "ps/wire/table_spec.h"

namespace pscore::ps {

using ReplyOutbox = std::vector<std::pair<ReplyFn, ByteBuffer>>;

// Throws invalid_argument unless `worker` is a pushing worker in [0, num_workers); worker -1,
// a read-only observer (TF's ps and evaluator tasks), is told so. `what` names the operation.
void check_worker_id(int worker, int num_workers, const std::string& what);

class ServerTable {
 public:
  // `log` (may be null) receives every state change before it is acknowledged.
  ServerTable(const TableLayout& layout, int shard, int num_shards, int num_workers,
              UpdateLog* log);

  const TableLayout& layout() const { return layout_; }
  const TableSpec& spec() const { return layout_.spec; }
  uint32_t id() const { return layout_.id; }
  bool dense() const { return layout_.spec.kind == TableKind::kDense; }
  const DensePart& part() const { return part_; }  // dense: this shard's slice

  // Applies (or, by the table's consistency mode, aggregates, drops or parks) a pushed gradient.
  // The reply goes into `out` unless it is parked, in which case a later call releases it.
  void push_dense(const PushHeader& h, const float* grad, bool want_values, ReplyFn reply,
                  ReplyOutbox& out);
  // want_rows: the reply also carries the rows of `ids` after the update (push_pull_sparse).
  void push_sparse(const PushHeader& h, int64_t n, const int64_t* ids, const float* grads,
                   bool want_rows, ReplyFn reply, ReplyOutbox& out);
  void pull_dense(float* out);
  // Creates missing rows with the initializer, then copies n rows of dim floats into out.
  void pull_sparse(int64_t n, const int64_t* ids, float* out);
  void assign_dense(const float* values);
  // Marks a worker finished: sync rounds stop waiting for it, ssp ignores its clock.
  void worker_done(int worker, ReplyOutbox& out);
  // Resets the open round; each parked push is answered as dropped (its update is not in the
  // table any more, e.g. after a checkpoint load) through `out`.
  void abandon_waiters(ReplyOutbox& out);
  // The step a (re)joining worker pushes next: the open sync round, its ssp clock, or 0.
  int64_t step_for(int worker);
  void set_log(UpdateLog* log) { log_ = log; }

  // Re-applies a write-ahead log record (kApplyDense, kApplySparse, kAssignDense).
  void replay(LogKind kind, WireReader& r);

  // Snapshot access: hold lock() while reading or restoring.
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mu_); }
  std::vector<float>& dense_values() { return values_; }
  std::vector<float>& dense_state() { return state_; }
  int64_t& dense_step() { return dense_step_; }
  SparseStore& sparse() { return *sparse_; }
  ConsistencyState& consistency() { return cons_; }
  int64_t num_rows() const;

 private:
  ByteBuffer push_reply(PushStatus status, int64_t progress, const ReplyValues& want);
  int64_t progress_for(int worker) const;
  bool handle_repeat(const PushHeader& h, ReplyValues& want, ReplyFn& reply, ReplyOutbox& out);
  bool drop_if_late(const PushHeader& h, ReplyValues& want, ReplyFn& reply, ReplyOutbox& out);
  void finish_push(const PushHeader& h, ReplyValues want, ReplyFn reply, ReplyOutbox& out);
  void close_round(ReplyOutbox& out);
  void release_ssp(ReplyOutbox& out);
  void copy_rows(int64_t n, const int64_t* ids, float* out);  // creates missing rows
  // With create, rows_ = the rows of ids, created when missing; without, only checks that they
  // would fit. Throws std::invalid_argument naming the table when they would pass its
  // max_rows_per_shard (nothing created).
  void make_rows(int64_t n, const int64_t* ids, bool create);
  void apply_dense(const float* grad);
  // apply_dense, copying each updated slice to out while it is still in cache (push_pull).
  void apply_dense_into(const float* grad, float* out);
  void apply_sparse(int64_t n, const int64_t* ids, const float* grads);
  void log_apply(LogKind kind, const std::vector<std::pair<int, uint64_t>>& seqs, int64_t round,
                 int64_t n_ids, const int64_t* ids, const float* grads, int64_t n_floats);
  void validate_worker(int worker) const;

  TableLayout layout_;
  int shard_;
  int num_workers_;
  UpdateLog* log_;
  std::mutex mu_;
  DensePart part_;
  std::vector<float> values_, state_, acc_;
  int64_t dense_step_ = 0;
  std::unique_ptr<SparseStore> sparse_;
  SparseAccumulator sparse_acc_;
  ConsistencyState cons_;
  std::vector<uint32_t> rows_;  // scratch: rows of a sparse batch
};

}  // namespace pscore::ps
