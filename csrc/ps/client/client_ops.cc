// PsClient operations: how each request is split over the shards and how replies are absorbed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "common/error.h"
#include "common/wire_codec.h"
#include "ps/client/ps_client.h"
#include "ps/storage/consistency.h"
#include "ps/storage/optimizer.h"
#include "ps/storage/partitioner.h"
#include "ps/wire/ps_protocol.h"

namespace pscore::ps {
namespace {

std::string quoted(const std::string& name) { return "'" + name + "'"; }

}  // namespace

std::shared_ptr<SubRequest> PsClient::make_sub(int shard, uint8_t type, uint32_t tag,
                                               std::string what) {
  auto s = std::make_shared<SubRequest>();
  s->shard = shard;
  s->header.type = type;
  s->header.tag = tag;
  s->what = std::move(what);
  return s;
}

PsClient::TableState& PsClient::table_state(const std::string& name) {
  auto it = tables_.find(name);
  if (it == tables_.end()) throw std::logic_error("table " + quoted(name) + " has no client state");
  return it->second;
}

// Records a push's status on its Work and, for sync/ssp tables, the table's progress.
std::function<void(SubRequest&)> PsClient::push_reply_handler(const std::string& name,
                                                              Consistency mode) {
  return [this, name, mode](SubRequest& sub) {
    const PushReply r =
        WireReader(sub.reply.data(), sub.reply.size(), sub.what).record<PushReply>("push reply");
    if (auto o = sub.owner.lock()) o->note_push(r.status, r.progress);
    if (mode == Consistency::kAsync) return;
    std::lock_guard<std::mutex> lk(state_mu_);
    TableState& st = table_state(name);
    st.step = std::max(st.step, r.progress);
  };
}

std::shared_ptr<Work> PsClient::run_blocking(const std::shared_ptr<Work>& w) {
  w->wait(-1);
  return w;
}

// One request to shard 0, which keeps the table catalog; blocks and returns the reply body.
std::string PsClient::ask_catalog(MsgType type, ByteBuffer body, const std::string& what) {
  auto w = std::make_shared<Work>(what);
  auto s = make_sub(0, uint8_t(type), 0, w->what());
  s->prefix = std::move(body);
  s->variable_reply = true;
  w->subs = {s};
  submit(w, w->subs);
  run_blocking(w);
  return w->replies().at(0);
}

// Asks every shard holding a part of the table to create it (with its share of `init`, if
// any) or join it; returns where this worker stands in it (the open sync round or its ssp clock).
int64_t PsClient::join_parts(const TableLayout& layout, const float* init,
                             const std::string& what) {
  std::vector<int> shards;
  if (layout.spec.kind == TableKind::kDense) {
    for (const DensePart& p : layout.parts) shards.push_back(p.shard);
  } else {
    for (int i = 0; i < num_shards_; ++i) shards.push_back(i);
  }
  auto parts = std::make_shared<Work>(what);
  for (int shard : shards) {
    auto ps = make_sub(shard, uint8_t(MsgType::kCreatePart), layout.id, parts->what());
    WireWriter pw(ps->prefix);
    encode_layout(pw, layout);
    const DensePart* mine = nullptr;
    for (const DensePart& p : layout.parts)
      if (p.shard == shard) mine = &p;
    uint64_t n = init && mine ? static_cast<uint64_t>(mine->numel) : 0;
    pw.u64(n);
    if (n) ps->parts.push_back({init + mine->offset, n * 4});
    ps->variable_reply = true;
    parts->subs.push_back(ps);
  }
  submit(parts, parts->subs);
  run_blocking(parts);
  int64_t step = 0;
  for (const std::string& r : parts->replies()) {
    WireReader pr(r.data(), r.size(), "create_part reply");
    pr.u8("created");
    step = std::max(step, pr.i64("step"));
  }
  return step;
}

TableLayout PsClient::create_table(const TableSpec& spec, const float* init, int64_t init_numel) {
  if (init && (spec.kind != TableKind::kDense || init_numel != spec.numel()))
    throw std::invalid_argument("table " + quoted(spec.name) + ": initial value has " +
                                std::to_string(init_numel) + " elements, the table " +
                                std::to_string(spec.numel()));
  ByteBuffer body;
  WireWriter bw(body);
  encode_spec(bw, spec);
  std::string reply =
      ask_catalog(MsgType::kCreateTable, std::move(body), "create_table " + quoted(spec.name));
  WireReader r(reply.data(), reply.size(), "create_table reply");
  r.u8("created");
  TableLayout layout = decode_layout(r);

  remember(layout, join_parts(layout, init, "create_table " + quoted(spec.name)));
  return layout;
}

TableLayout PsClient::lookup_table(const std::string& name) {
  ByteBuffer body;
  WireWriter(body).string(name, "table name");
  std::string reply =
      ask_catalog(MsgType::kLookupTable, std::move(body), "lookup_table " + quoted(name));
  WireReader r(reply.data(), reply.size(), "lookup_table reply");
  TableLayout layout = decode_layout(r);
  // A sync or ssp table: learn the open round (or this worker's clock) as create does, so the
  // first push is not dropped as late.
  const int64_t step = layout.spec.consistency.mode == Consistency::kAsync
                           ? 0
                           : join_parts(layout, nullptr, "lookup_table " + quoted(name));
  remember(layout, step);
  return layout;
}

TableLayout PsClient::layout_of(const std::string& name) {
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    auto it = tables_.find(name);
    if (it != tables_.end() && !it->second.missing) return it->second.layout;
  }
  return lookup_table(name);
}

int64_t PsClient::table_step(const std::string& name) {
  layout_of(name);
  std::lock_guard<std::mutex> lk(state_mu_);
  return table_state(name).step;
}

float PsClient::clip_factor(const TableSpec& spec, const float* g, int64_t n) const {
  const OptimizerSpec& o = spec.optimizer;
  if (o.clip_norm <= 0) return 1.0f;
  double sq = 0;
  if (o.clip_value > 0) {
    const float v = static_cast<float>(o.clip_value);
    for (int64_t i = 0; i < n; ++i) {
      double x = std::min(std::max(g[i], -v), v);
      sq += x * x;
    }
  } else {
    sq = sum_of_squares(g, n);
  }
  return clip_norm_factor(o, std::sqrt(sq));
}

std::shared_ptr<Work> PsClient::dense_op(const std::string& name, uint8_t type, const float* grad,
                                         float* out, int64_t n) {
  TableLayout layout = layout_of(name);
  const char* op = msg_type_name(type);
  if (layout.spec.kind != TableKind::kDense)
    throw std::invalid_argument(std::string(op) + " " + quoted(name) + ": the table is sparse");
  if (n != layout.spec.numel())
    throw std::invalid_argument(std::string(op) + " " + quoted(name) + ": the array has " +
                                std::to_string(n) + " elements, the table " +
                                std::to_string(layout.spec.numel()));
  const bool pushes =
      type == uint8_t(MsgType::kPushDense) || type == uint8_t(MsgType::kPushPullDense);
  PushHeader h;
  h.worker = opts_.worker;
  if (pushes) {
    h.clip_factor = clip_factor(layout.spec, grad, n);
    std::lock_guard<std::mutex> lk(state_mu_);
    TableState& st = table_state(name);
    h.seq = ++next_seq_;
    h.step = st.step;
  }
  auto w = std::make_shared<Work>(std::string(op) + " " + quoted(name));
  const Consistency mode = layout.spec.consistency.mode;
  for (const DensePart& p : layout.parts) {
    auto s = make_sub(p.shard, type, layout.id, w->what());
    const size_t bytes = static_cast<size_t>(p.numel) * 4;
    if (pushes) WireWriter(s->prefix).record(h);
    if (grad) s->parts.push_back({grad + p.offset, bytes});
    if (out) {
      s->direct = reinterpret_cast<uint8_t*>(out + p.offset);
      s->direct_bytes = bytes;
    }
    if (pushes) {
      s->reply_prefix_bytes = sizeof(PushReply);
      s->on_reply = push_reply_handler(name, mode);
    }
    w->subs.push_back(s);
  }
  submit(w, w->subs);
  return w;
}

std::shared_ptr<Work> PsClient::push(const std::string& name, const float* grad, int64_t n) {
  return dense_op(name, uint8_t(MsgType::kPushDense), grad, nullptr, n);
}

std::shared_ptr<Work> PsClient::pull(const std::string& name, float* out, int64_t n) {
  return dense_op(name, uint8_t(MsgType::kPullDense), nullptr, out, n);
}

std::shared_ptr<Work> PsClient::push_pull(const std::string& name, const float* grad, float* out,
                                          int64_t n) {
  return dense_op(name, uint8_t(MsgType::kPushPullDense), grad, out, n);
}

std::shared_ptr<Work> PsClient::assign(const std::string& name, const float* values, int64_t n) {
  return dense_op(name, uint8_t(MsgType::kAssignDense), values, nullptr, n);
}

std::shared_ptr<Work> PsClient::broadcast(uint8_t type, const std::string& what,
                                          const ByteBuffer& body, bool variable_reply) {
  auto w = std::make_shared<Work>(what);
  for (int shard = 0; shard < num_shards_; ++shard) {
    auto s = make_sub(shard, type, 0, what);
    s->prefix.append(body.data(), body.size());
    s->variable_reply = variable_reply;
    w->subs.push_back(s);
  }
  submit(w, w->subs);
  return w;
}

std::shared_ptr<Work> PsClient::worker_done() {
  ByteBuffer b;
  WireWriter(b).i32(opts_.worker);
  return broadcast(uint8_t(MsgType::kWorkerDone), "worker_done", b, false);
}

std::shared_ptr<Work> PsClient::global_step(int64_t delta) {
  auto w = std::make_shared<Work>("global_step");
  auto s = make_sub(0, uint8_t(MsgType::kGlobalStep), 0, w->what());
  WireWriter(s->prefix).i64(delta);
  s->reply_prefix_bytes = 8;
  w->subs = {s};
  w->set_retryable(delta == 0);
  submit(w, w->subs);
  return w;
}

std::shared_ptr<Work> PsClient::save(const std::string& dir) {
  ByteBuffer body;
  WireWriter(body).string(dir, "directory");
  return broadcast(uint8_t(MsgType::kSave), "save " + quoted(dir), body, false);
}

std::shared_ptr<Work> PsClient::load(const std::string& dir) {
  ByteBuffer body;
  WireWriter(body).string(dir, "directory");
  auto w = broadcast(uint8_t(MsgType::kLoad), "load " + quoted(dir), body, false);
  std::lock_guard<std::mutex> lk(state_mu_);
  tables_.clear();  // layouts and steps come from the checkpoint now
  return w;
}

std::shared_ptr<Work> PsClient::stats() {
  return broadcast(uint8_t(MsgType::kStats), "stats", ByteBuffer(), true);
}

std::shared_ptr<Work> PsClient::stats(int shard) {
  if (shard < 0 || shard >= num_shards_) {
    throw std::out_of_range("stats: shard " + std::to_string(shard) + " is not in 0.." +
                            std::to_string(num_shards_ - 1));
  }
  auto w = std::make_shared<Work>("stats");
  auto s = make_sub(shard, uint8_t(MsgType::kStats), 0, "stats");
  s->variable_reply = true;
  w->subs = {s};
  submit(w, w->subs);
  return w;
}

std::shared_ptr<Work> PsClient::ping(int shard) {
  auto w = std::make_shared<Work>("ping");
  w->subs = {make_sub(shard, uint8_t(MsgType::kPing), 0, "ping")};
  submit(w, w->subs);
  return w;
}

std::shared_ptr<Work> PsClient::combine(const std::vector<std::shared_ptr<Work>>& works) {
  auto w = std::make_shared<Work>("batch");
  w->children = works;
  return w;
}

}  // namespace pscore::ps
