#include "ps/server/shard_checkpoint.h"

#include <cstring>
#include <stdexcept>

#include "ps/durability/checkpoint_metadata.h"
#include "ps/durability/json.h"
#include "ps/durability/safetensors_file.h"
#include "ps/server/shard_state.h"

namespace pscore::ps {
namespace {

template <typename T>
std::vector<T> int_vector(const MetadataValue& v) {
  std::vector<T> out;
  for (int64_t x : v.integers()) out.push_back(static_cast<T>(x));
  return out;
}

// Sparse rows copied out of the chunked store into contiguous tensors.
struct SparseCopy {
  std::vector<int64_t> ids, steps;
  std::vector<float> values, state;
};

// The table's layout (checkpoint_metadata) and this shard's state of it.
Json describe(ServerTable& t) {
  Json d = table_layout_json(t.layout());
  d.set("offset", t.part().offset);
  d.set("numel", t.part().numel);
  d.set("step", t.dense_step());
  d.set("round", t.consistency().round());
  Json highs = Json::array(), windows = Json::array();
  for (const SeqWindow& w : t.consistency().all_seqs()) {
    highs.push_back(w.high());
    windows.push_back(w.bits_hex());
  }
  d.set("last_seq", highs);
  d.set("seq_windows", windows);
  d.set("clock", integer_list(t.consistency().all_clocks()));
  return d;
}

void add_sparse(SafetensorsWriter& w, ServerTable& t, SparseCopy& c) {
  SparseStore& st = t.sparse();
  const int64_t rows = st.num_rows(), dim = st.dim(), slots = st.num_slots();
  c.ids.resize(rows);
  c.steps.resize(rows);
  c.values.resize(rows * dim);
  c.state.resize(rows * dim * slots);
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t row = static_cast<uint32_t>(r);
    c.ids[r] = st.id_of(row);
    c.steps[r] = st.step(row);
    std::memcpy(&c.values[r * dim], st.values(row), dim * 4);
    if (slots) std::memcpy(&c.state[r * dim * slots], st.state(row), dim * slots * 4);
  }
  const std::string& n = t.spec().name;
  w.add({n, "F32", {rows, dim}, c.values.data(), c.values.size() * 4});
  w.add({n + ":ids", "I64", {rows}, c.ids.data(), c.ids.size() * 8});
  w.add({n + ":steps", "I64", {rows}, c.steps.data(), c.steps.size() * 8});
  if (slots) w.add({n + ":state", "F32", {rows, slots, dim}, c.state.data(), c.state.size() * 4});
}

void restore_table(ServerTable& t, const SafetensorsReader& f, const MetadataValue& d) {
  const std::string& n = t.spec().name;
  const int slots = t.spec().optimizer.num_slots();
  if (t.dense()) {
    const TensorEntry& v = f.get(n, "F32");
    if (v.nbytes != t.dense_values().size() * 4)
      throw std::invalid_argument("checkpoint: table '" + n + "' part size does not match");
    std::memcpy(t.dense_values().data(), v.data, v.nbytes);
    if (slots) {
      const TensorEntry& s = f.get(n + ":state", "F32");
      if (s.nbytes != t.dense_state().size() * 4)
        throw std::invalid_argument("checkpoint: table '" + n + "' state size does not match");
      std::memcpy(t.dense_state().data(), s.data, s.nbytes);
    }
    t.dense_step() = d["step"].integer();
  } else {
    const TensorEntry& ids = f.get(n + ":ids", "I64");
    const TensorEntry& steps = f.get(n + ":steps", "I64");
    const TensorEntry& vals = f.get(n, "F32");
    const int64_t rows = static_cast<int64_t>(ids.nbytes / 8), dim = t.spec().dim();
    const TensorEntry* state = slots ? &f.get(n + ":state", "F32") : nullptr;
    if (steps.nbytes != ids.nbytes || vals.nbytes != static_cast<uint64_t>(rows * dim * 4) ||
        (state && state->nbytes != static_cast<uint64_t>(rows * dim * slots * 4)))
      throw std::invalid_argument("checkpoint: sparse table '" + n + "' tensors disagree in size");
    auto* id_p = static_cast<const int64_t*>(ids.data);
    auto* step_p = static_cast<const int64_t*>(steps.data);
    auto* val_p = static_cast<const float*>(vals.data);
    auto* st_p = state ? static_cast<const float*>(state->data) : nullptr;
    for (int64_t r = 0; r < rows; ++r)
      t.sparse().restore_row(id_p[r], val_p + r * dim, st_p ? st_p + r * dim * slots : nullptr,
                             step_p[r]);
  }
  std::vector<std::string> windows;
  if (d.has("seq_windows"))
    for (const MetadataValue& w : d["seq_windows"].elements()) windows.push_back(w.text());
  t.consistency().restore(d["round"].integer(), int_vector<uint64_t>(d["last_seq"]), windows,
                          int_vector<int64_t>(d["clock"]), {});
}

// A table read from a checkpoint is checked as one asked for over the wire is: a damaged or
// crafted file must not build a table the server would have refused (a sparse row of width 0).
TableLayout checked(TableLayout layout, const std::string& path, int num_workers) {
  try {
    layout.spec.validate(num_workers);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("checkpoint " + path + ": " + e.what());
  }
  return layout;
}

}  // namespace

CheckpointImage ShardCheckpoint::capture(ShardState& shard, uint64_t wal_index) {
  CheckpointImage image;
  SafetensorsWriter& w = image.writer_;
  const ShardOptions& o = shard.opts_;
  {
    std::lock_guard<std::mutex> lk(shard.mu_);
    Json catalog = Json::array();
    for (const auto& [name, layout] : shard.catalog_) catalog.push_back(table_layout_json(layout));
    w.set_metadata("catalog", catalog.dump());
    w.set_metadata("global_step", std::to_string(shard.global_step_));
    w.set_metadata("done", integer_list(shard.done_).dump());
  }
  write_checkpoint_format(w);
  w.set_metadata("shard", std::to_string(o.shard));
  w.set_metadata("num_shards", std::to_string(o.num_shards));
  w.set_metadata("num_workers", std::to_string(o.num_workers));
  w.set_metadata("wal_index", std::to_string(wal_index));
  Json tables = Json::array();
  for (auto& t : shard.tables()) {
    auto lock = t->lock();
    tables.push_back(describe(*t));
    const std::string& n = t->spec().name;
    if (t->dense()) {
      auto v = std::make_shared<const std::vector<float>>(t->dense_values());
      image.owned_.push_back(v);
      w.add({n, "F32", {static_cast<int64_t>(v->size())}, v->data(), v->size() * 4});
      const int slots = t->spec().optimizer.num_slots();
      if (slots) {
        auto s = std::make_shared<const std::vector<float>>(t->dense_state());
        image.owned_.push_back(s);
        w.add({n + ":state",
               "F32",
               {slots, static_cast<int64_t>(v->size())},
               s->data(),
               s->size() * 4});
      }
    } else {
      auto copy = std::make_shared<SparseCopy>();
      image.owned_.push_back(copy);
      add_sparse(w, *t, *copy);
    }
  }
  w.set_metadata("tables", tables.dump());
  return image;
}

void ShardCheckpoint::read(ShardState& shard, const std::string& path, DoneWorkers done_workers) {
  SafetensorsReader f(path);
  const CheckpointMetadata meta(f);
  const ShardOptions& o = shard.opts_;
  if (meta.integer("shard") != o.shard || meta.integer("num_shards") != o.num_shards)
    throw std::invalid_argument("checkpoint " + path + ": written by shard " + meta.text("shard") +
                                " of " + meta.text("num_shards") + ", this is shard " +
                                std::to_string(o.shard) + " of " + std::to_string(o.num_shards));
  std::map<uint32_t, std::shared_ptr<ServerTable>> tables;
  Json table_root;
  for (const MetadataValue& d : meta.parsed("tables", table_root).elements()) {
    TableLayout layout = checked(meta.table_layout(d), path, o.num_workers);
    auto t = std::make_shared<ServerTable>(layout, o.shard, o.num_shards, o.num_workers,
                                           shard.log_.get());
    restore_table(*t, f, d);
    tables[layout.id] = std::move(t);
  }
  std::map<std::string, TableLayout> catalog;
  std::vector<int64_t> bytes(o.num_shards, 0);
  Json catalog_root;
  for (const MetadataValue& entry : meta.parsed("catalog", catalog_root).elements()) {
    TableLayout layout = checked(meta.catalog_layout(entry), path, o.num_workers);
    for (const DensePart& p : layout.parts)
      if (p.shard >= 0 && p.shard < o.num_shards) bytes[p.shard] += p.numel * 4;
    catalog[layout.spec.name] = std::move(layout);
  }
  Json done_root;
  auto done = int_vector<uint8_t>(meta.parsed("done", done_root));
  if (done_workers == DoneWorkers::kFromLiveShard) {
    std::lock_guard<std::mutex> lk(shard.mu_);
    done = shard.done_;
  }
  done.resize(o.num_workers, 0);
  const int64_t global_step = meta.integer("global_step");
  const uint64_t wal_index = static_cast<uint64_t>(meta.integer("wal_index"));
  ReplyOutbox ignored;
  for (auto& [id, t] : tables)
    for (int w = 0; w < o.num_workers; ++w)
      if (done[w]) t->worker_done(w, ignored);
  std::lock_guard<std::mutex> lk(shard.mu_);
  shard.tables_ = std::move(tables);
  shard.catalog_ = std::move(catalog);
  shard.shard_bytes_ = std::move(bytes);
  shard.done_ = std::move(done);
  shard.global_step_ = global_step;
  shard.snapshot_wal_index_ = wal_index;
}

}  // namespace pscore::ps
