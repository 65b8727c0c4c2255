#include "ps/request_handler.h"

#include <cstring>
#include <shared_mutex>

#include "common/clock.h"
#include "ps/json.h"
#include "ps/optimizer.h"
#include "ps/ps_protocol.h"

namespace pscore::ps {
namespace {

FrameHeader reply_header(const FrameHeader& req, MsgType type, size_t length) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(type);
  h.flags = req.type;
  h.tag = req.tag;
  h.seq = req.seq;
  h.length = length;
  return h;
}

ByteBuffer from_bytes(const std::vector<uint8_t>& v) {
  ByteBuffer b;
  b.append(v.data(), v.size());
  return b;
}

// Clamps then scales a pushed gradient as the table's clipping settings ask.
void clip(const OptimizerSpec& opt, float clip_factor, float* g, int64_t n) {
  clip_gradient_values(opt, g, n);
  if (opt.clip_norm > 0 && clip_factor != 1.0f) scale_in_place(g, n, clip_factor);
}

std::string name_of(const ServerTable& t) { return "table '" + t.spec().name + "'"; }

// Requests that append to the write-ahead log (the others never wait for a snapshot).
bool appends_to_log(uint8_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kCreateTable:
    case MsgType::kCreatePart:
    case MsgType::kDropTable:
    case MsgType::kPushDense:
    case MsgType::kPushPullDense:
    case MsgType::kAssignDense:
    case MsgType::kPushSparse:
    case MsgType::kPushPullSparse:
    case MsgType::kWorkerDone:
    case MsgType::kGlobalStep:
      return true;
    default:
      return false;
  }
}

// A table's consistency state on this shard (kTableStatus): the open sync round, the workers
// whose push it holds and those it still waits for, the finished workers, the ssp clocks.
std::string table_status_json(ServerTable& t, int num_workers) {
  auto lk = t.lock();
  const ConsistencyState& c = t.consistency();
  Json pushed = Json::array(), waiting = Json::array(), done = Json::array(),
       clocks = Json::array();
  for (int w = 0; w < num_workers; ++w) {
    if (c.done(w))
      done.push_back(w);
    else if (c.contributed(w))
      pushed.push_back(w);
    else
      waiting.push_back(w);
    clocks.push_back(c.clock(w));
  }
  Json j = Json::object();
  j.set("table", t.spec().name);
  j.set("consistency", consistency_name(t.spec().consistency.mode));
  j.set("round", c.round());
  j.set("pushed", std::move(pushed));
  j.set("waiting_for", std::move(waiting));
  j.set("done", std::move(done));
  j.set("clocks", std::move(clocks));
  return j.dump();
}

}  // namespace

void send_error(ServerConnection& conn, const FrameHeader& request, uint32_t code,
                const std::string& message) {
  std::vector<uint8_t> body;
  ByteWriter w(&body);
  w.put<uint32_t>(code);
  w.put_string(message.substr(0, 4096));
  conn.send(reply_header(request, MsgType::kError, body.size()), from_bytes(body));
}

ReplyFn RequestHandler::reply_fn(const std::shared_ptr<ServerConnection>& conn, const InFrame& f) {
  std::weak_ptr<ServerConnection> weak = conn;
  FrameHeader req = f.header;
  int64_t received = f.received_us;
  ServerStats* stats = &stats_;
  return [weak, req, received, stats](ByteBuffer&& body) {
    auto c = weak.lock();
    if (!c) return;
    c->send(reply_header(req, MsgType::kReply, body.size()), std::move(body));
    stats->latency.record(now_us() - received);
  };
}

void RequestHandler::reply(const std::shared_ptr<ServerConnection>& conn, const InFrame& f,
                           ByteBuffer&& body) {
  conn->send(reply_header(f.header, MsgType::kReply, body.size()), std::move(body));
  stats_.latency.record(now_us() - f.received_us);
}

void RequestHandler::send_all(ReplyOutbox& out) {
  for (auto& [fn, body] : out) fn(std::move(body));
  out.clear();
}

void RequestHandler::handle(const std::shared_ptr<ServerConnection>& conn, InFrame&& frame) {
  stats_.count_request(frame.header.type);
  uint32_t code = 0;
  std::string message;
  try {
    if (before_request && appends_to_log(frame.header.type)) before_request();
    dispatch(conn, frame);
    return;
  } catch (const std::invalid_argument& e) {
    code = static_cast<uint32_t>(ErrorCode::kInvalidArgument);
    message = e.what();
  } catch (const TableNotFound& e) {
    code = static_cast<uint32_t>(ErrorCode::kNotFound);
    message = e.what();
  } catch (const NetworkError& e) {
    code = static_cast<uint32_t>(ErrorCode::kInvalidArgument);
    message =
        std::string("malformed ") + msg_type_name(frame.header.type) + " request: " + e.what();
  } catch (const std::exception& e) {
    code = static_cast<uint32_t>(ErrorCode::kInternal);
    message = e.what();
  }
  stats_.errors.fetch_add(1);
  send_error(*conn, frame.header, code,
             "shard " + std::to_string(shard_.options().shard) + ": " + message);
}

void RequestHandler::push_dense(const std::shared_ptr<ServerConnection>& conn, InFrame& f,
                                bool want_values) {
  std::shared_lock<std::shared_mutex> gate(shard_.apply_gate());
  auto t = shard_.table(f.header.tag);
  if (!t->dense()) throw std::invalid_argument(name_of(*t) + " is sparse; use push_sparse");
  ByteReader r(f.body.data(), f.body.size(), "push");
  auto h = r.get<PushHeader>();
  const int64_t n = t->part().numel;
  if (r.remaining() != static_cast<size_t>(n) * 4)
    throw std::invalid_argument(
        name_of(*t) + ": gradient for shard " + std::to_string(shard_.options().shard) + " has " +
        std::to_string(r.remaining() / 4) + " elements, expected " + std::to_string(n));
  auto* grad = reinterpret_cast<float*>(f.body.data() + sizeof(PushHeader));
  clip(t->spec().optimizer, h.clip_factor, grad, n);
  ReplyOutbox out;
  t->push_dense(h, grad, want_values, reply_fn(conn, f), out);
  gate.unlock();
  send_all(out);
}

void RequestHandler::push_sparse(const std::shared_ptr<ServerConnection>& conn, InFrame& f,
                                 bool want_rows) {
  std::shared_lock<std::shared_mutex> gate(shard_.apply_gate());
  auto t = shard_.table(f.header.tag);
  if (t->dense()) throw std::invalid_argument(name_of(*t) + " is dense; use push");
  ByteReader r(f.body.data(), f.body.size(), "push_sparse");
  auto h = r.get<PushHeader>();
  int64_t n = r.get<int64_t>();
  const int64_t dim = t->spec().dim();
  if (n < 0 || r.remaining() != static_cast<size_t>(n) * (8 + 4 * dim))
    throw std::invalid_argument(name_of(*t) + ": push_sparse payload does not hold " +
                                std::to_string(n) + " ids and rows of " + std::to_string(dim));
  auto* ids = reinterpret_cast<const int64_t*>(r.take(n * 8));
  auto* grads = reinterpret_cast<float*>(const_cast<uint8_t*>(r.take(n * dim * 4)));
  clip(t->spec().optimizer, h.clip_factor, grads, n * dim);
  stats_.rows_pushed.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  ReplyOutbox out;
  t->push_sparse(h, n, ids, grads, want_rows, reply_fn(conn, f), out);
  if (want_rows) stats_.rows_pulled.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  gate.unlock();
  send_all(out);
}

void RequestHandler::dispatch(const std::shared_ptr<ServerConnection>& conn, InFrame& f) {
  const auto type = static_cast<MsgType>(f.header.type);
  ByteReader r(f.body.data(), f.body.size(), msg_type_name(f.header.type));
  switch (type) {
    case MsgType::kPing:
      return reply(conn, f, ByteBuffer());
    case MsgType::kPushDense:
    case MsgType::kPushPullDense:
      return push_dense(conn, f, type == MsgType::kPushPullDense);
    case MsgType::kPushSparse:
    case MsgType::kPushPullSparse:
      return push_sparse(conn, f, type == MsgType::kPushPullSparse);
    case MsgType::kPullDense: {
      std::shared_lock<std::shared_mutex> gate(shard_.apply_gate());
      auto t = shard_.table(f.header.tag);
      if (!t->dense()) throw std::invalid_argument(name_of(*t) + " is sparse; use pull_sparse");
      ByteBuffer body(static_cast<size_t>(t->part().numel) * 4);
      t->pull_dense(reinterpret_cast<float*>(body.data()));
      gate.unlock();
      return reply(conn, f, std::move(body));
    }
    case MsgType::kPullSparse: {
      std::shared_lock<std::shared_mutex> gate(shard_.apply_gate());
      auto t = shard_.table(f.header.tag);
      if (t->dense()) throw std::invalid_argument(name_of(*t) + " is dense; use pull");
      int64_t n = r.get<int64_t>();
      if (n < 0 || r.remaining() != static_cast<size_t>(n) * 8)
        throw std::invalid_argument(name_of(*t) + ": pull_sparse payload does not hold " +
                                    std::to_string(n) + " ids");
      auto* ids = reinterpret_cast<const int64_t*>(r.take(n * 8));
      ByteBuffer body(static_cast<size_t>(n * t->spec().dim()) * 4);
      t->pull_sparse(n, ids, reinterpret_cast<float*>(body.data()));
      stats_.rows_pulled.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      gate.unlock();
      return reply(conn, f, std::move(body));
    }
    case MsgType::kAssignDense: {
      std::shared_lock<std::shared_mutex> gate(shard_.apply_gate());
      auto t = shard_.table(f.header.tag);
      if (!t->dense() || f.body.size() != static_cast<size_t>(t->part().numel) * 4)
        throw std::invalid_argument(name_of(*t) + ": assign needs the dense part's " +
                                    std::to_string(t->part().numel) + " values");
      t->assign_dense(reinterpret_cast<const float*>(f.body.data()));
      gate.unlock();
      return reply(conn, f, ByteBuffer());
    }
    case MsgType::kCreateTable: {
      if (shard_.options().shard != 0)
        throw std::invalid_argument("the table catalog lives on shard 0");
      TableSpec spec = decode_spec(r);
      auto [layout, created] = shard_.catalog_create(spec);
      std::vector<uint8_t> body;
      ByteWriter w(&body);
      w.put<uint8_t>(created ? 1 : 0);
      encode_layout(w, layout);
      return reply(conn, f, from_bytes(body));
    }
    case MsgType::kLookupTable: {
      if (shard_.options().shard != 0)
        throw std::invalid_argument("the table catalog lives on shard 0");
      TableLayout layout = shard_.catalog_lookup(r.get_string(256));
      std::vector<uint8_t> body;
      ByteWriter w(&body);
      encode_layout(w, layout);
      return reply(conn, f, from_bytes(body));
    }
    case MsgType::kListTables: {
      if (shard_.options().shard != 0)
        throw std::invalid_argument("the table catalog lives on shard 0");
      const std::vector<TableLayout> layouts = shard_.catalog_list();
      std::vector<uint8_t> body;
      ByteWriter w(&body);
      w.put<uint32_t>(static_cast<uint32_t>(layouts.size()));
      for (const TableLayout& l : layouts) encode_layout(w, l);
      return reply(conn, f, from_bytes(body));
    }
    case MsgType::kDropTable: {
      ReplyOutbox parked;
      const bool dropped = shard_.drop_table(r.get_string(256), parked);
      send_all(parked);
      ByteBuffer body;
      body.put<uint8_t>(dropped ? 1 : 0);
      return reply(conn, f, std::move(body));
    }
    case MsgType::kTableStatus: {
      std::string j = table_status_json(*shard_.table(f.header.tag), shard_.options().num_workers);
      ByteBuffer body;
      body.append(j.data(), j.size());
      return reply(conn, f, std::move(body));
    }
    case MsgType::kCreatePart: {
      TableLayout layout = decode_layout(r);
      uint64_t n = r.get<uint64_t>();
      if (n > r.remaining() / 4) throw NetworkError("initial values truncated");
      const float* init = n ? reinterpret_cast<const float*>(r.take(n * 4)) : nullptr;
      bool created = shard_.create_part(layout, init, static_cast<int64_t>(n));
      ByteBuffer body;
      body.put<uint8_t>(created ? 1 : 0);
      // Where a joining worker stands: the open sync round, or its ssp clock.
      body.put<int64_t>(shard_.table(layout.id)->step_for(conn->hello.worker));
      return reply(conn, f, std::move(body));
    }
    case MsgType::kWorkerDone: {
      int32_t worker = r.get<int32_t>();
      ReplyOutbox out;
      {
        std::shared_lock<std::shared_mutex> gate(shard_.apply_gate());
        shard_.worker_done(worker, out);
      }
      send_all(out);
      return reply(conn, f, ByteBuffer());
    }
    case MsgType::kGlobalStep: {
      int64_t delta = r.get<int64_t>();
      std::shared_lock<std::shared_mutex> gate(shard_.apply_gate());
      ByteBuffer body;
      body.put<int64_t>(shard_.add_global_step(delta));
      gate.unlock();
      return reply(conn, f, std::move(body));
    }
    case MsgType::kStats: {
      std::string j = stats_json ? stats_json() : "{}";
      ByteBuffer body;
      body.append(j.data(), j.size());
      return reply(conn, f, std::move(body));
    }
    case MsgType::kSave:
      shard_.save(r.get_string(4096));
      return reply(conn, f, ByteBuffer());
    case MsgType::kLoad: {
      ReplyOutbox parked;
      shard_.load(r.get_string(4096), parked);
      send_all(parked);
      return reply(conn, f, ByteBuffer());
    }
    default:
      throw std::invalid_argument(std::string("unexpected request type ") +
                                  std::to_string(f.header.type) + " (" +
                                  msg_type_name(f.header.type) + ")");
  }
}

}  // namespace pscore::ps
