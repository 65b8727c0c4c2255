#include "ps/server/shard_state.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "common/error.h"
#include "ps/durability/checkpoint_legacy_v1.h"
#include "ps/durability/log_table_record.h"
#include "ps/durability/safetensors_file.h"
#include "ps/server/shard_checkpoint.h"

namespace pscore::ps {
namespace {

bool file_exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

uint64_t file_bytes(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf)) return buf;
  return path;
}

std::string layout_record(const TableLayout& layout) {
  WireWriter<> w;
  write_log_table_record(w, layout);
  return w.take();
}

// The layout of a record of the format of logs up to 780a580 (the wire encoding of the day, read
// by the frozen decoder); r moves past it.
TableLayout legacy_layout(WireReader& r, const std::string& where) {
  const size_t n = r.remaining();
  const uint8_t* bytes = r.raw(n, "table layout");
  size_t used = 0;
  TableLayout layout = legacy_v1::decode_layout_prefix(bytes, n, &used, where);
  r = WireReader(bytes + used, n - used, "write-ahead log record");
  return layout;
}

}  // namespace

ShardState::ShardState(const ShardOptions& opts)
    : opts_(opts), shard_bytes_(opts.num_shards, 0), done_(opts.num_workers, 0) {
  if (opts.num_shards < 1 || opts.shard < 0 || opts.shard >= opts.num_shards)
    throw std::invalid_argument("shard " + std::to_string(opts.shard) + " is outside [0, " +
                                std::to_string(opts.num_shards) + ")");
  if (opts.num_workers < 1)
    throw std::invalid_argument("num_workers must be >= 1, got " +
                                std::to_string(opts.num_workers));
}

ShardState::~ShardState() = default;

std::string ShardState::snapshot_path(const std::string& dir) const {
  char name[64];
  std::snprintf(name, sizeof(name), "shard-%05d-of-%05d.safetensors", opts_.shard,
                opts_.num_shards);
  return dir + "/" + name;
}

uint64_t ShardState::recover() {
  if (opts_.recover_dir.empty()) return 0;
  std::unique_lock<std::shared_mutex> gate(gate_);
  make_directories(opts_.recover_dir);
  std::string snap = snapshot_path(opts_.recover_dir);
  std::string wal = snap.substr(0, snap.size() - std::string(".safetensors").size()) + ".wal";
  if (file_exists(snap)) {
    ReplyOutbox none;  // recovery runs before any worker connects
    load_locked(snap, none, ShardCheckpoint::DoneWorkers::kFromCheckpoint);
    snapshot_bytes_ = file_bytes(snap);
  }
  uint64_t replayed = 0, intact = 0;
  uint64_t next = UpdateLog::replay(
      wal, snapshot_wal_index_,
      [&](LogKind kind, uint64_t index, WireReader& r) {
        replay_record(kind, r, wal + " record " + std::to_string(index));
        ++replayed;
      },
      &intact);
  if (file_exists(wal) && ::truncate(wal.c_str(), static_cast<off_t>(intact)) != 0)
    throw Error(errno_message("cannot trim the torn tail of " + wal, errno));
  log_ = std::make_unique<UpdateLog>(wal, next, opts_.fsync_log);
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [id, t] : tables_) t->set_log(log_.get());
  return replayed;
}

void ShardState::replay_record(LogKind kind, WireReader& r, const std::string& where) {
  switch (kind) {
    case LogKind::kApplyDense:
    case LogKind::kApplySparse:
    case LogKind::kAssignDense: {
      uint32_t id = r.u32("table id");
      table(id)->replay(kind, r);
      return;
    }
    case LogKind::kCatalogAdd:
    case LogKind::kCatalogAddWireV1: {
      TableLayout layout =
          kind == LogKind::kCatalogAdd ? read_log_table_record(r, where) : legacy_layout(r, where);
      std::lock_guard<std::mutex> lk(mu_);
      if (!catalog_.count(layout.spec.name)) catalog_add_locked(layout);
      return;
    }
    case LogKind::kCreatePart:
    case LogKind::kCreatePartWireV1: {
      TableLayout layout =
          kind == LogKind::kCreatePart ? read_log_table_record(r, where) : legacy_layout(r, where);
      uint64_t n = r.u64("initial value count");
      std::vector<float> init = r.vector<float>(n, "initial values");
      std::lock_guard<std::mutex> lk(mu_);
      if (!tables_.count(layout.id))
        add_part_locked(layout, n ? init.data() : nullptr, static_cast<int64_t>(n));
      return;
    }
    case LogKind::kWorkerDone: {
      int32_t w = r.i32("worker");
      ReplyOutbox ignored;
      worker_done(w, ignored);
      return;
    }
    case LogKind::kGlobalStep: {
      std::lock_guard<std::mutex> lk(mu_);
      global_step_ = r.i64("global step");
      return;
    }
    case LogKind::kDropTable: {
      ReplyOutbox none;  // recovery runs before any worker connects
      drop_locked(r.string("table name", 256), none);
      return;
    }
  }
  throw NetworkError("write-ahead log: unknown record kind " + std::to_string(int(kind)));
}

void ShardState::catalog_add_locked(const TableLayout& layout) {
  catalog_[layout.spec.name] = layout;
  for (const DensePart& p : layout.parts)
    if (p.shard >= 0 && p.shard < opts_.num_shards) shard_bytes_[p.shard] += p.numel * 4;
}

std::pair<TableLayout, bool> ShardState::catalog_create(const TableSpec& spec) {
  spec.validate(opts_.num_workers);
  std::shared_lock<std::shared_mutex> gate(gate_);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = catalog_.find(spec.name);
  if (it != catalog_.end()) {
    if (!it->second.spec.same_as(spec))
      throw std::invalid_argument("table '" + spec.name +
                                  "' already exists with other settings (existing vs requested): " +
                                  it->second.spec.describe_differences(spec));
    return {it->second, false};
  }
  TableLayout layout;
  layout.id = table_id_for(spec.name);
  for (const auto& [name, other] : catalog_)
    if (other.id == layout.id)
      throw std::invalid_argument("table name '" + spec.name + "' hashes to the id of table '" +
                                  name + "'; choose another name");
  layout.spec = spec;
  if (spec.kind == TableKind::kDense) {
    std::vector<int64_t> loads = shard_bytes_;
    layout.parts = plan_dense_parts(spec.numel(), 4, loads, opts_.partition);
  }
  if (log_) {
    const std::string record = layout_record(layout);
    log_->append(LogKind::kCatalogAdd, {{record.data(), record.size()}});
  }
  catalog_add_locked(layout);
  return {layout, true};
}

TableLayout ShardState::catalog_lookup(const std::string& name) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = catalog_.find(name);
  if (it == catalog_.end()) throw TableNotFound("table '" + name + "' does not exist");
  return it->second;
}

std::vector<TableLayout> ShardState::catalog_list() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<TableLayout> out;
  for (const auto& [name, layout] : catalog_) out.push_back(layout);
  return out;
}

std::vector<int64_t> ShardState::catalog_shard_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return shard_bytes_;
}

void ShardState::add_part_locked(const TableLayout& layout, const float* init, int64_t init_numel) {
  auto t = std::make_shared<ServerTable>(layout, opts_.shard, opts_.num_shards, opts_.num_workers,
                                         log_.get());
  if (init) {
    if (!t->dense() || init_numel != t->part().numel)
      throw std::invalid_argument("table '" + layout.spec.name + "': initial values for shard " +
                                  std::to_string(opts_.shard) + " have " +
                                  std::to_string(init_numel) + " elements, the part has " +
                                  std::to_string(t->part().numel));
    t->dense_values().assign(init, init + init_numel);
  }
  ReplyOutbox ignored;
  for (int w = 0; w < opts_.num_workers; ++w)
    if (done_[w]) t->worker_done(w, ignored);
  tables_[layout.id] = std::move(t);
}

bool ShardState::create_part(const TableLayout& layout, const float* init, int64_t init_numel) {
  layout.spec.validate(opts_.num_workers);
  if (layout.id != table_id_for(layout.spec.name))
    throw std::invalid_argument("table '" + layout.spec.name + "': id does not match its name");
  if (layout.spec.kind == TableKind::kDense) {
    bool mine = false;
    int64_t covered = 0;
    for (const DensePart& p : layout.parts) {
      mine = mine || p.shard == opts_.shard;
      if (p.shard < 0 || p.shard >= opts_.num_shards || p.offset != covered || p.numel < 0)
        throw std::invalid_argument("table '" + layout.spec.name + "': malformed layout");
      covered += p.numel;
    }
    if (covered != layout.spec.numel() || !mine)
      throw std::invalid_argument("table '" + layout.spec.name + "' has no part on shard " +
                                  std::to_string(opts_.shard));
  }
  std::shared_lock<std::shared_mutex> gate(gate_);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = tables_.find(layout.id);
  if (it != tables_.end()) {
    if (!it->second->spec().same_as(layout.spec))
      throw std::invalid_argument("table '" + layout.spec.name + "' already exists on shard " +
                                  std::to_string(opts_.shard) +
                                  " with other settings (existing vs requested): " +
                                  it->second->spec().describe_differences(layout.spec));
    return false;
  }
  if (log_) {
    const std::string record = layout_record(layout);
    uint64_t n = init ? static_cast<uint64_t>(init_numel) : 0;
    log_->append(LogKind::kCreatePart, {{record.data(), record.size()}, {&n, 8}, {init, n * 4}});
  }
  add_part_locked(layout, init, init_numel);
  dropped_.erase(layout.id);
  return true;
}

bool ShardState::drop_table(const std::string& name, ReplyOutbox& parked) {
  if (name.empty() || name.size() > 256)
    throw std::invalid_argument("drop_table: a table name has 1 to 256 characters");
  // Exclusive: no request holds the table, so no record of it follows the drop in the log.
  std::unique_lock<std::shared_mutex> gate(gate_);
  if (!drop_locked(name, parked)) return false;
  if (log_) {
    const std::string record = WireWriter<>().string(name, "table name").take();
    log_->append(LogKind::kDropTable, {{record.data(), record.size()}});
  }
  return true;
}

bool ShardState::drop_locked(const std::string& name, ReplyOutbox& parked) {
  const uint32_t id = table_id_for(name);
  std::shared_ptr<ServerTable> part;
  bool listed = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto t = tables_.find(id);
    if (t != tables_.end() && t->second->spec().name == name) {
      part = t->second;
      tables_.erase(t);
    }
    auto c = catalog_.find(name);
    listed = c != catalog_.end();
    if (listed) {
      for (const DensePart& p : c->second.parts)
        if (p.shard >= 0 && p.shard < opts_.num_shards) shard_bytes_[p.shard] -= p.numel * 4;
      catalog_.erase(c);
    }
    if (part || listed) dropped_[id] = name;
  }
  if (part) part->abandon_waiters(parked);
  return part || listed;
}

std::shared_ptr<ServerTable> ShardState::table(uint32_t id) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = tables_.find(id);
  if (it != tables_.end()) return it->second;
  auto gone = dropped_.find(id);
  if (gone != dropped_.end())
    throw TableNotFound("table '" + gone->second + "' (id " + std::to_string(id) +
                        ") was dropped from shard " + std::to_string(opts_.shard));
  throw TableNotFound("table id " + std::to_string(id) + " is not on shard " +
                      std::to_string(opts_.shard) + " (create the table first)");
}

std::vector<std::shared_ptr<ServerTable>> ShardState::tables() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::shared_ptr<ServerTable>> out;
  for (const auto& [id, t] : tables_) out.push_back(t);
  return out;
}

void ShardState::worker_done(int worker, ReplyOutbox& out) {
  check_worker_id(worker, opts_.num_workers, "worker_done");
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_[worker]) return;
    done_[worker] = 1;
    int32_t w = worker;
    if (log_) log_->append(LogKind::kWorkerDone, {{&w, 4}});
  }
  for (auto& t : tables()) t->worker_done(worker, out);
}

int64_t ShardState::add_global_step(int64_t delta) {
  std::lock_guard<std::mutex> lk(mu_);
  if (delta == 0) return global_step_;
  global_step_ += delta;
  if (log_) log_->append(LogKind::kGlobalStep, {{&global_step_, 8}});
  return global_step_;
}

void ShardState::save(const std::string& dir) {
  std::lock_guard<std::mutex> one(save_mu_);
  make_directories(dir);
  UpdateLog::Mark mark;
  std::unique_lock<std::shared_mutex> gate(gate_);
  if (log_) mark = log_->mark();
  const CheckpointImage image = ShardCheckpoint::capture(*this, mark.index);
  gate.unlock();  // a consistent cut is taken: requests go on while it is written
  write_snapshot(image, dir, mark);
}

void ShardState::write_snapshot(const CheckpointImage& image, const std::string& dir,
                                const UpdateLog::Mark& mark) {
  const std::string path = snapshot_path(dir);
  image.write(path);
  if (!log_ || real_path(dir) != real_path(opts_.recover_dir)) return;
  snapshot_bytes_ = file_bytes(path);
  // The snapshot covers the records before the mark; those appended since stay for replay.
  log_->drop_before(mark);
}

void ShardState::load(const std::string& dir, ReplyOutbox& parked) {
  std::lock_guard<std::mutex> one(save_mu_);
  std::unique_lock<std::shared_mutex> gate(gate_);
  load_locked(snapshot_path(dir), parked, ShardCheckpoint::DoneWorkers::kFromLiveShard);
  if (!log_) return;
  // The loaded state must be on disk before the log records anything relative to it.
  make_directories(opts_.recover_dir);
  const UpdateLog::Mark mark = log_->mark();
  write_snapshot(ShardCheckpoint::capture(*this, mark.index), opts_.recover_dir, mark);
}

void ShardState::load_locked(const std::string& path, ReplyOutbox& parked,
                             ShardCheckpoint::DoneWorkers done_workers) {
  for (auto& t : tables()) t->abandon_waiters(parked);
  ShardCheckpoint::read(*this, path, done_workers);
}

}  // namespace pscore::ps
