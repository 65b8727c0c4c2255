// PsClient's sparse operations: ids hashed to shards, each shard's rows sent straight from and
// received straight into the caller's arrays (one iovec per run of adjacent rows).
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "ps/client/ps_client.h"
#include "ps/storage/partitioner.h"
#include "ps/wire/ps_protocol.h"

namespace pscore::ps {
namespace {

std::string quoted(const std::string& name) { return "'" + name + "'"; }

// The byte ranges of rows `picked` (ascending) of an array of rows of row_bytes, adjacent rows
// merged: a shard's rows are sent from, and received into, the caller's arrays in place.
template <typename Ptr>
std::vector<std::pair<Ptr, size_t>> row_segments(Ptr base, const std::vector<int64_t>& picked,
                                                 size_t row_bytes) {
  std::vector<std::pair<Ptr, size_t>> segs;
  int64_t prev = -2;
  for (int64_t i : picked) {
    if (i == prev + 1)
      segs.back().second += row_bytes;
    else
      segs.emplace_back(base + static_cast<size_t>(i) * row_bytes, row_bytes);
    prev = i;
  }
  return segs;
}

}  // namespace

std::shared_ptr<Work> PsClient::push_sparse(const std::string& name, const int64_t* ids,
                                            const float* grads, int64_t n) {
  return sparse_push_op(name, ids, grads, nullptr, n);
}

std::shared_ptr<Work> PsClient::push_pull_sparse(const std::string& name, const int64_t* ids,
                                                 const float* grads, float* out, int64_t n) {
  return sparse_push_op(name, ids, grads, out, n);
}

std::shared_ptr<Work> PsClient::sparse_push_op(const std::string& name, const int64_t* ids,
                                               const float* grads, float* out, int64_t n) {
  const char* op = out ? "push_pull_sparse" : "push_sparse";
  TableLayout layout = layout_of(name);
  if (layout.spec.kind != TableKind::kSparse)
    throw std::invalid_argument(std::string(op) + " " + quoted(name) + ": the table is dense");
  if (n < 0)
    throw std::invalid_argument(std::string(op) + " " + quoted(name) + ": negative id count");
  const int64_t dim = layout.spec.dim();
  const Consistency mode = layout.spec.consistency.mode;
  PushHeader h;
  h.worker = opts_.worker;
  h.clip_factor = clip_factor(layout.spec, grads, n * dim);
  h.seq = ++next_seq_;
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    h.step = table_state(name).step;
  }
  auto w = std::make_shared<Work>(std::string(op) + " " + quoted(name));
  auto rows = std::make_shared<std::vector<std::vector<int64_t>>>(num_shards_);
  if (num_shards_ > 1)
    for (int64_t i = 0; i < n; ++i) (*rows)[shard_for_id(ids[i], num_shards_)].push_back(i);
  const uint8_t type = uint8_t(out ? MsgType::kPushPullSparse : MsgType::kPushSparse);
  for (int shard = 0; shard < num_shards_; ++shard) {
    const int64_t count = num_shards_ == 1 ? n : static_cast<int64_t>((*rows)[shard].size());
    // Sync and ssp tables hear from every worker on every shard each step, even with no rows.
    if (count == 0 && mode == Consistency::kAsync) continue;
    auto s = make_sub(shard, type, layout.id, w->what());
    WireWriter(s->prefix).record(h).i64(count);
    s->reply_prefix_bytes = sizeof(PushReply);
    const size_t row_bytes = static_cast<size_t>(dim) * 4;
    if (num_shards_ == 1) {
      s->parts.push_back({ids, static_cast<size_t>(n) * 8});
      s->parts.push_back({grads, static_cast<size_t>(n) * row_bytes});
    } else {
      const auto& mine = (*rows)[shard];
      s->prefix.resize(sizeof(PushHeader) + 8 + static_cast<size_t>(count) * 8);
      auto* id_out = reinterpret_cast<int64_t*>(s->prefix.data() + sizeof(PushHeader) + 8);
      for (int64_t k = 0; k < count; ++k) id_out[k] = ids[mine[k]];
      for (const auto& seg : row_segments(reinterpret_cast<const uint8_t*>(grads), mine, row_bytes))
        s->parts.emplace_back(seg.first, seg.second);
    }
    if (out) {
      s->direct_bytes = static_cast<size_t>(count) * row_bytes;
      if (num_shards_ == 1)
        s->direct = reinterpret_cast<uint8_t*>(out);
      else
        s->scatter = row_segments(reinterpret_cast<uint8_t*>(out), (*rows)[shard], row_bytes);
    }
    s->on_reply = push_reply_handler(name, mode);
    w->subs.push_back(s);
  }
  submit(w, w->subs);
  return w;
}

std::shared_ptr<Work> PsClient::pull_sparse(const std::string& name, const int64_t* ids, float* out,
                                            int64_t n) {
  TableLayout layout = layout_of(name);
  if (layout.spec.kind != TableKind::kSparse)
    throw std::invalid_argument("pull_sparse " + quoted(name) + ": the table is dense");
  if (n < 0) throw std::invalid_argument("pull_sparse " + quoted(name) + ": negative id count");
  const int64_t dim = layout.spec.dim();
  auto w = std::make_shared<Work>("pull_sparse " + quoted(name));
  auto rows = std::make_shared<std::vector<std::vector<int64_t>>>(num_shards_);
  if (num_shards_ > 1)
    for (int64_t i = 0; i < n; ++i) (*rows)[shard_for_id(ids[i], num_shards_)].push_back(i);
  for (int shard = 0; shard < num_shards_; ++shard) {
    const int64_t count = num_shards_ == 1 ? n : static_cast<int64_t>((*rows)[shard].size());
    if (count == 0) continue;
    auto s = make_sub(shard, uint8_t(MsgType::kPullSparse), layout.id, w->what());
    WireWriter(s->prefix).i64(count);
    s->direct_bytes = static_cast<size_t>(count * dim) * 4;
    if (num_shards_ == 1) {
      s->parts.push_back({ids, static_cast<size_t>(n) * 8});
      s->direct = reinterpret_cast<uint8_t*>(out);
    } else {
      const auto& mine = (*rows)[shard];
      s->prefix.resize(8 + static_cast<size_t>(count) * 8);
      auto* id_out = reinterpret_cast<int64_t*>(s->prefix.data() + 8);
      for (int64_t k = 0; k < count; ++k) id_out[k] = ids[mine[k]];
      s->scatter =
          row_segments(reinterpret_cast<uint8_t*>(out), mine, static_cast<size_t>(dim) * 4);
    }
    w->subs.push_back(s);
  }
  submit(w, w->subs);
  return w;
}

}  // namespace pscore::ps
