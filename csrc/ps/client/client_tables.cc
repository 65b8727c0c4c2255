// PsClient's table administration beyond create and lookup: listing and dropping tables, a
// table's consistency state on each shard, and the error for a table a shard does not hold.
#include <stdexcept>

#include "common/wire_codec.h"
#include "ps/client/ps_client.h"
#include "ps/wire/ps_protocol.h"

namespace pscore::ps {
namespace {

std::string quoted(const std::string& name) { return "'" + name + "'"; }

}  // namespace

void PsClient::remember(const TableLayout& layout, int64_t step) {
  std::vector<uint64_t> incarnations;
  {
    std::lock_guard<std::mutex> lk(mu_);
    incarnations = incarnations_;
  }
  std::lock_guard<std::mutex> lk(state_mu_);
  TableState& st = tables_[layout.spec.name];
  st.layout = layout;
  st.step = std::max(st.step, step);
  st.incarnations = std::move(incarnations);
  st.missing = false;
}

std::vector<TableLayout> PsClient::list_tables() {
  std::string reply = ask_catalog(MsgType::kListTables, {}, "list_tables");
  WireReader r(reply.data(), reply.size(), "list_tables reply");
  const uint32_t n = r.u32("table count");
  std::vector<TableLayout> out;
  for (uint32_t i = 0; i < n; ++i) out.push_back(decode_layout(r));
  return out;
}

void PsClient::drop_table(const std::string& name) {
  ByteBuffer body;
  WireWriter(body).string(name, "table name");
  auto w = broadcast(uint8_t(MsgType::kDropTable), "drop_table " + quoted(name), body, true);
  w->wait(-1);
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    tables_.erase(name);
  }
  for (const std::string& r : w->replies())
    if (!r.empty() && r[0] == 1) return;
  throw TableNotFound("drop_table " + quoted(name) + ": table " + quoted(name) +
                      " does not exist on any of the " + std::to_string(num_shards_) + " shards");
}

std::shared_ptr<Work> PsClient::table_status(const std::string& name) {
  const TableLayout layout = layout_of(name);
  auto w = std::make_shared<Work>("table_status " + quoted(name));
  std::vector<int> shards;
  if (layout.spec.kind == TableKind::kDense) {
    for (const DensePart& p : layout.parts) shards.push_back(p.shard);
  } else {
    for (int i = 0; i < num_shards_; ++i) shards.push_back(i);
  }
  for (int shard : shards) {
    auto s = make_sub(shard, uint8_t(MsgType::kTableStatus), layout.id, w->what());
    s->variable_reply = true;
    w->subs.push_back(s);
  }
  submit(w, w->subs);
  return w;
}

std::exception_ptr PsClient::missing_table_error(const SubRequest& s) {
  return std::make_exception_ptr(TableNotFound(missing_table_message(s)));
}

std::string PsClient::missing_table_message(const SubRequest& s) {
  const int shard = s.shard;
  std::string address;
  uint64_t incarnation = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    address = addresses_[shard];
    incarnation = incarnations_[shard];
  }
  const std::string where = "shard " + std::to_string(shard) + " at " + address;
  std::string name;
  uint64_t known_incarnation = 0;
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    for (auto& [table_name, st] : tables_) {
      if (st.layout.id != s.header.tag) continue;
      name = table_name;
      if (static_cast<size_t>(shard) < st.incarnations.size())
        known_incarnation = st.incarnations[shard];
      st.missing = true;
      break;
    }
  }
  if (name.empty()) return s.what + " failed on " + where + ": " + s.table_missing;
  const std::string table = "table " + quoted(name) + " (id " + std::to_string(s.header.tag) + ")";
  if (known_incarnation != 0 && known_incarnation != incarnation)
    return s.what + " failed: " + where + " restarted (new incarnation) without recovering " +
           table + "; serve shards with --recover DIR to keep their tables, or create it again";
  if (s.table_missing.find("was dropped") != std::string::npos)
    return s.what + " failed: " + table + " was dropped (drop_table) from " + where;
  return s.what + " failed: " + table + " does not exist on " + where;
}

}  // namespace pscore::ps
