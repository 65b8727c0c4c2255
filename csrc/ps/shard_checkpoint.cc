#include "ps/shard_checkpoint.h"

#include <cstring>
#include <stdexcept>

#include "common/hmac.h"
#include "ps/json.h"
#include "ps/safetensors_file.h"
#include "ps/shard_state.h"

namespace pscore::ps {
namespace {

constexpr const char* kFormat = "pscore.ps.shard/1";

std::string layout_hex(const TableLayout& layout) {
  std::vector<uint8_t> bytes;
  ByteWriter w(&bytes);
  encode_layout(w, layout);
  return crypto::hex(bytes.data(), bytes.size());
}

TableLayout layout_from_hex(const std::string& hex) {
  if (hex.size() % 2) throw std::invalid_argument("checkpoint: odd-length layout");
  std::vector<uint8_t> bytes(hex.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto nib = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      throw std::invalid_argument("checkpoint: bad hex in layout");
    };
    bytes[i] = static_cast<uint8_t>(nib(hex[2 * i]) * 16 + nib(hex[2 * i + 1]));
  }
  ByteReader r(bytes.data(), bytes.size(), "checkpoint layout");
  return decode_layout(r);
}

template <typename T>
Json int_list(const std::vector<T>& v) {
  Json a = Json::array();
  for (T x : v) a.push_back(static_cast<int64_t>(x));
  return a;
}

template <typename T>
std::vector<T> int_vector(const Json& j, const char* what) {
  std::vector<T> out;
  for (const Json& x : j.as_array(what)) out.push_back(static_cast<T>(x.as_int(what)));
  return out;
}

// Sparse rows copied out of the chunked store into contiguous tensors.
struct SparseCopy {
  std::vector<int64_t> ids, steps;
  std::vector<float> values, state;
};

Json describe(ServerTable& t) {
  const TableSpec& s = t.spec();
  Json d = Json::object();
  d.set("name", s.name);
  d.set("id", static_cast<int64_t>(t.id()));
  d.set("kind", s.kind == TableKind::kDense ? "dense" : "sparse");
  d.set("shape", int_list(s.shape));
  d.set("optimizer", optimizer_name(s.optimizer.kind));
  d.set("consistency", consistency_name(s.consistency.mode));
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
  d.set("clock", int_list(t.consistency().all_clocks()));
  d.set("layout", layout_hex(t.layout()));
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

void restore_table(ServerTable& t, const SafetensorsReader& f, const Json& d) {
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
    t.dense_step() = d.at("step").as_int("step");
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
  if (const Json* j = d.find("seq_windows"))
    for (const Json& w : j->as_array("seq_windows")) windows.push_back(w.as_string("seq_windows"));
  t.consistency().restore(d.at("round").as_int("round"),
                          int_vector<uint64_t>(d.at("last_seq"), "last_seq"), windows,
                          int_vector<int64_t>(d.at("clock"), "clock"), {});
}

}  // namespace

CheckpointImage ShardCheckpoint::capture(ShardState& shard, uint64_t wal_index) {
  CheckpointImage image;
  SafetensorsWriter& w = image.writer_;
  const ShardOptions& o = shard.opts_;
  {
    std::lock_guard<std::mutex> lk(shard.mu_);
    Json catalog = Json::array();
    for (const auto& [name, layout] : shard.catalog_) catalog.push_back(layout_hex(layout));
    w.set_metadata("catalog", catalog.dump());
    w.set_metadata("global_step", std::to_string(shard.global_step_));
    w.set_metadata("done", int_list(shard.done_).dump());
  }
  w.set_metadata("format", kFormat);
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

void ShardCheckpoint::read(ShardState& shard, const std::string& path) {
  SafetensorsReader f(path);
  const ShardOptions& o = shard.opts_;
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument("checkpoint " + path + ": " + why);
  };
  if (f.metadata_value("format") != kFormat) bad("not a pscore shard checkpoint");
  if (f.metadata_value("shard") != std::to_string(o.shard) ||
      f.metadata_value("num_shards") != std::to_string(o.num_shards))
    bad("written by shard " + f.metadata_value("shard") + " of " + f.metadata_value("num_shards") +
        ", this is shard " + std::to_string(o.shard) + " of " + std::to_string(o.num_shards));
  std::map<uint32_t, std::shared_ptr<ServerTable>> tables;
  const Json table_list = Json::parse(f.metadata_value("tables"));
  for (const Json& d : table_list.as_array("tables")) {
    TableLayout layout = layout_from_hex(d.at("layout").as_string("layout"));
    auto t = std::make_shared<ServerTable>(layout, o.shard, o.num_shards, o.num_workers,
                                           shard.log_.get());
    restore_table(*t, f, d);
    tables[layout.id] = std::move(t);
  }
  std::map<std::string, TableLayout> catalog;
  std::vector<int64_t> bytes(o.num_shards, 0);
  const Json catalog_list = Json::parse(f.metadata_value("catalog"));
  for (const Json& h : catalog_list.as_array("catalog")) {
    TableLayout layout = layout_from_hex(h.as_string("catalog"));
    for (const DensePart& p : layout.parts)
      if (p.shard >= 0 && p.shard < o.num_shards) bytes[p.shard] += p.numel * 4;
    catalog[layout.spec.name] = std::move(layout);
  }
  auto done = int_vector<uint8_t>(Json::parse(f.metadata_value("done")), "done");
  done.resize(o.num_workers, 0);
  ReplyOutbox ignored;
  for (auto& [id, t] : tables)
    for (int w = 0; w < o.num_workers; ++w)
      if (done[w]) t->worker_done(w, ignored);
  std::lock_guard<std::mutex> lk(shard.mu_);
  shard.tables_ = std::move(tables);
  shard.catalog_ = std::move(catalog);
  shard.shard_bytes_ = std::move(bytes);
  shard.done_ = std::move(done);
  shard.global_step_ = std::stoll(f.metadata_value("global_step"));
  shard.snapshot_wal_index_ = std::stoull(f.metadata_value("wal_index"));
}

}  // namespace pscore::ps
