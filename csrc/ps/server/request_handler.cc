#include "ps/server/request_handler.h"

#include <cstring>
#include <shared_mutex>

#include "common/clock.h"
#include "common/error.h"
#include "common/wire_codec.h"
#include "ps/server/table_status.h"
#include "ps/storage/optimizer.h"
#include "ps/wire/ps_protocol.h"

namespace pscore::ps {
namespace {

constexpr uint64_t kMaxTableNameBytes = 256;
constexpr uint64_t kMaxDirectoryBytes = 4096;

FrameHeader reply_header(const FrameHeader& req, MsgType type, size_t length) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(type);
  h.flags = req.type;
  h.tag = req.tag;
  h.seq = req.seq;
  h.length = length;
  return h;
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

}  // namespace

void send_error(ServerConnection& conn, const FrameHeader& request, uint32_t code,
                const std::string& message) {
  ByteBuffer body;
  WireWriter(body).u32(code).string(message.substr(0, 4096), "error message");
  const size_t n = body.size();
  conn.send(reply_header(request, MsgType::kError, n), std::move(body));
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
  WireReader r(f.body.data(), f.body.size(), "push");
  auto h = r.record<PushHeader>("push header");
  const int64_t n = t->part().numel;
  if (r.remaining() != static_cast<size_t>(n) * 4)
    throw std::invalid_argument(
        name_of(*t) + ": gradient for shard " + std::to_string(shard_.options().shard) + " has " +
        std::to_string(r.remaining() / 4) + " elements, expected " + std::to_string(n));
  // The body is this request's own buffer: clipping scales the gradient in place.
  auto* grad = const_cast<float*>(r.array<float>(static_cast<uint64_t>(n), "gradient"));
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
  WireReader r(f.body.data(), f.body.size(), "push_sparse");
  auto h = r.record<PushHeader>("push header");
  int64_t n = r.i64("id count");
  const int64_t dim = t->spec().dim();
  if (n < 0 || r.remaining() != static_cast<size_t>(n) * (8 + 4 * dim))
    throw std::invalid_argument(name_of(*t) + ": push_sparse payload does not hold " +
                                std::to_string(n) + " ids and rows of " + std::to_string(dim));
  const int64_t* ids = r.array<int64_t>(static_cast<uint64_t>(n), "ids");
  // The body is this request's own buffer: clipping scales the gradients in place.
  auto* grads = const_cast<float*>(r.array<float>(static_cast<uint64_t>(n * dim), "gradients"));
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
  WireReader r(f.body.data(), f.body.size(), msg_type_name(f.header.type));
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
      int64_t n = r.i64("id count");
      if (n < 0 || r.remaining() != static_cast<size_t>(n) * 8)
        throw std::invalid_argument(name_of(*t) + ": pull_sparse payload does not hold " +
                                    std::to_string(n) + " ids");
      const int64_t* ids = r.array<int64_t>(static_cast<uint64_t>(n), "ids");
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
      ByteBuffer body;
      WireWriter w(body);
      w.u8(created ? 1 : 0);
      encode_layout(w, layout);
      return reply(conn, f, std::move(body));
    }
    case MsgType::kLookupTable: {
      if (shard_.options().shard != 0)
        throw std::invalid_argument("the table catalog lives on shard 0");
      TableLayout layout = shard_.catalog_lookup(r.string("table name", kMaxTableNameBytes));
      ByteBuffer body;
      WireWriter w(body);
      encode_layout(w, layout);
      return reply(conn, f, std::move(body));
    }
    case MsgType::kListTables: {
      if (shard_.options().shard != 0)
        throw std::invalid_argument("the table catalog lives on shard 0");
      const std::vector<TableLayout> layouts = shard_.catalog_list();
      ByteBuffer body;
      WireWriter w(body);
      w.u32(static_cast<uint32_t>(layouts.size()));
      for (const TableLayout& l : layouts) encode_layout(w, l);
      return reply(conn, f, std::move(body));
    }
    case MsgType::kDropTable: {
      ReplyOutbox parked;
      const bool dropped = shard_.drop_table(r.string("table name", kMaxTableNameBytes), parked);
      send_all(parked);
      ByteBuffer body;
      WireWriter(body).u8(dropped ? 1 : 0);
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
      uint64_t n = r.u64("initial value count");
      // Copied out: the layout before them has any length, so they may sit at any alignment.
      const std::vector<float> init = r.vector<float>(n, "initial values");
      bool created = shard_.create_part(layout, n ? init.data() : nullptr, static_cast<int64_t>(n));
      ByteBuffer body;
      // Where a joining worker stands: the open sync round, or its ssp clock.
      WireWriter(body)
          .u8(created ? 1 : 0)
          .i64(shard_.table(layout.id)->step_for(conn->hello.worker));
      return reply(conn, f, std::move(body));
    }
    case MsgType::kWorkerDone: {
      int32_t worker = r.i32("worker");
      ReplyOutbox out;
      {
        std::shared_lock<std::shared_mutex> gate(shard_.apply_gate());
        shard_.worker_done(worker, out);
      }
      send_all(out);
      return reply(conn, f, ByteBuffer());
    }
    case MsgType::kGlobalStep: {
      int64_t delta = r.i64("delta");
      std::shared_lock<std::shared_mutex> gate(shard_.apply_gate());
      ByteBuffer body;
      WireWriter(body).i64(shard_.add_global_step(delta));
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
      shard_.save(r.string("directory", kMaxDirectoryBytes));
      return reply(conn, f, ByteBuffer());
    case MsgType::kLoad: {
      ReplyOutbox parked;
      shard_.load(r.string("directory", kMaxDirectoryBytes), parked);
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
