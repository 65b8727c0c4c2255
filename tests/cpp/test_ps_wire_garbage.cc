// Truncated and garbage payloads fed to every parameter-server decoder (handshake frames, table
// specs and layouts, the write-ahead log's table records, the frozen format-1 layout decoder) and
// to a live server for every request type: each is an error (NetworkError or
// std::invalid_argument), never a crash or an out-of-bounds read (CI runs this under ASan).
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/frame_io.h"
#include "common/socket.h"
#include "common/wire_codec.h"
#include "ps/client/ps_client.h"
#include "ps/durability/checkpoint_legacy_v1.h"
#include "ps/durability/log_table_record.h"
#include "ps/server/ps_server.h"
#include "ps/wire/ps_handshake.h"
#include "ps/wire/ps_protocol.h"
#include "ps/wire/table_spec.h"

using namespace pscore;
using namespace pscore::ps;

namespace {

using Decoder = std::function<void(const uint8_t* p, size_t n)>;

TableLayout sample_layout() {
  TableLayout l;
  l.spec.name = "emb";
  l.spec.shape = {3, 4};
  l.spec.init.kind = InitKind::kUniform;
  l.spec.init.b = 1;
  l.spec.optimizer.kind = OptimizerKind::kAdam;
  l.id = table_id_for(l.spec.name);
  l.parts = {{0, 0, 6}, {1, 6, 6}};
  return l;
}

std::string wire_layout(const TableLayout& l) {
  ByteBuffer b;
  WireWriter w(b);
  encode_layout(w, l);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// True when decode throws one of the errors bad input may raise; a crash fails the test run.
bool rejects(const Decoder& decode, const std::vector<uint8_t>& bytes) {
  try {
    decode(bytes.data(), bytes.size());
  } catch (const NetworkError&) {
    return true;
  } catch (const std::invalid_argument&) {
    return true;
  }
  return false;
}

// Every proper prefix of `valid` is rejected; random bytes and random corruptions of `valid`
// either decode or are rejected.
void fuzz(const std::string& what, const std::string& valid, const Decoder& decode) {
  std::vector<uint8_t> whole(valid.begin(), valid.end());
  ASSERT_FALSE(rejects(decode, whole)) << what << ": the valid encoding is rejected";
  for (size_t cut = 0; cut < valid.size(); ++cut) {
    std::vector<uint8_t> prefix(valid.begin(), valid.begin() + cut);  // exactly cut bytes
    EXPECT_TRUE(rejects(decode, prefix)) << what << ": a prefix of " << cut << " bytes decodes";
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 500; ++i) {
    std::vector<uint8_t> junk(rng() % (2 * valid.size() + 8));
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    rejects(decode, junk);
    std::vector<uint8_t> corrupt = whole;
    for (int k = 0; k < 3; ++k) corrupt[rng() % corrupt.size()] = static_cast<uint8_t>(rng());
    rejects(decode, corrupt);
  }
}

TEST(PsWireGarbage, HandshakeDecoders) {
  Hello h;
  h.version = kProtocolVersion;
  h.worker = 3;
  h.authenticate = true;
  h.job_id = "job";
  fuzz("hello", encode_hello(h), [](const uint8_t* p, size_t n) { decode_hello(p, n); });
  fuzz("challenge", encode_challenge(Challenge{}),
       [](const uint8_t* p, size_t n) { decode_challenge(p, n); });
  fuzz("welcome", encode_welcome(Welcome{}),
       [](const uint8_t* p, size_t n) { decode_welcome(p, n); });
}

TEST(PsWireGarbage, TableSpecsAndLayouts) {
  const TableLayout l = sample_layout();
  fuzz("layout", wire_layout(l), [](const uint8_t* p, size_t n) {
    WireReader r(p, n, "layout");
    decode_layout(r);
    r.finish();
  });
  fuzz("format-1 layout", wire_layout(l), [](const uint8_t* p, size_t n) {
    size_t used = 0;
    legacy_v1::decode_layout_prefix(p, n, &used, "log record");
    if (used != n) throw std::invalid_argument("trailing bytes");
  });
  WireWriter<> record;
  write_log_table_record(record, l);
  fuzz("log table record", record.take(), [](const uint8_t* p, size_t n) {
    WireReader r(p, n, "log record");
    read_log_table_record(r, "log record");
    r.finish();
  });
}

// A raw connection to a server that has said welcome.
Socket welcomed(int port) {
  Socket s = Socket::connect("127.0.0.1", port, Deadline(5000), "server");
  Hello h;
  h.version = kProtocolVersion;
  FrameHeader fh;
  fh.type = static_cast<uint8_t>(MsgType::kHello);
  send_frame(s, fh, encode_hello(h), Deadline(5000), "hello");
  Frame f = recv_frame(s, kMaxHandshakeBytes, Deadline(5000), "server", "welcome");
  EXPECT_EQ(f.header.type, static_cast<uint8_t>(MsgType::kWelcome));
  return s;
}

// Sends one request; returns the type of the server's answer (kReply or kError), or 0 when it
// closed the connection.
uint8_t answer(const Socket& s, MsgType type, uint32_t tag, const std::string& body) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(type);
  h.tag = tag;
  h.seq = 1;
  try {
    send_frame(s, h, body, Deadline(5000), "request");
    Frame f = recv_frame(s, uint64_t(1) << 30, Deadline(10000), "server", "reply");
    EXPECT_TRUE(f.header.type == static_cast<uint8_t>(MsgType::kReply) ||
                f.header.type == static_cast<uint8_t>(MsgType::kError));
    return f.header.type;
  } catch (const NetworkError&) {
    return 0;
  }
}

TEST(PsWireGarbage, ServerAnswersGarbageRequestsAndKeepsServing) {
  ServerOptions o;
  o.log_connections = false;
  PsServer server(o);
  server.start();
  ClientOptions co;
  co.timeout_ms = 20000;
  PsClient client(co, 1);
  client.connect(0, "127.0.0.1", server.port());
  TableSpec dense;
  dense.name = "d";
  dense.shape = {8};
  TableSpec sparse;
  sparse.name = "s";
  sparse.kind = TableKind::kSparse;
  sparse.shape = {4};
  const uint32_t dense_id = client.create_table(dense, nullptr, 0).id;
  const uint32_t sparse_id = client.create_table(sparse, nullptr, 0).id;

  // Valid bodies for each request type; their prefixes and random bytes are sent too.
  const std::string name = WireWriter<>().string("d").take();
  const std::string push_dense =
      WireWriter<>().record(PushHeader{}).bytes(std::string(8 * 4, '\0').data(), 32).take();
  const std::string ids = WireWriter<>().i64(2).i64(5).i64(-9).take();
  const std::string push_sparse = WireWriter<>()
                                      .record(PushHeader{})
                                      .bytes(ids.data(), ids.size())
                                      .bytes(std::string(2 * 4 * 4, '\0').data(), 32)
                                      .take();
  ByteBuffer spec_body;
  {
    WireWriter w(spec_body);
    TableSpec t = dense;
    t.name = "t";
    encode_spec(w, t);
  }
  struct Case {
    MsgType type;
    uint32_t tag;
    std::string body;
    bool random;  // also send random bodies (not where a body names a directory or a size)
  };
  const std::vector<Case> cases = {
      {MsgType::kCreateTable, 0,
       std::string(reinterpret_cast<const char*>(spec_body.data()), spec_body.size()), false},
      {MsgType::kCreatePart, dense_id, wire_layout(sample_layout()) + WireWriter<>().u64(0).take(),
       false},
      {MsgType::kLookupTable, 0, name, true},
      {MsgType::kDropTable, 0, WireWriter<>().string("gone").take(), true},
      {MsgType::kTableStatus, dense_id, "", true},
      {MsgType::kPushDense, dense_id, push_dense, true},
      {MsgType::kPushPullDense, dense_id, push_dense, true},
      {MsgType::kPullDense, dense_id, "", true},
      {MsgType::kAssignDense, dense_id, std::string(8 * 4, '\0'), true},
      {MsgType::kPushSparse, sparse_id, push_sparse, true},
      {MsgType::kPushPullSparse, sparse_id, push_sparse, true},
      {MsgType::kPullSparse, sparse_id, ids, true},
      {MsgType::kGlobalStep, 0, WireWriter<>().i64(1).take(), false},
      {MsgType::kSave, 0, WireWriter<>().string("/nonexistent/pscore").take(), false},
  };
  std::mt19937 rng(99);
  Socket s = welcomed(server.port());
  auto send = [&](const Case& c, const std::string& body) {
    const uint8_t type = answer(s, c.type, c.tag, body);
    if (type == 0) s = welcomed(server.port());
    return type;
  };
  for (const Case& c : cases) {
    // A truncated request is answered with an error naming what is malformed.
    for (size_t cut = 0; cut < c.body.size(); ++cut)
      EXPECT_EQ(send(c, c.body.substr(0, cut)), static_cast<uint8_t>(MsgType::kError))
          << msg_type_name(static_cast<uint8_t>(c.type)) << " cut to " << cut << " bytes";
    if (!c.random) continue;
    for (int i = 0; i < 50; ++i) {
      std::string junk(rng() % (c.body.size() + 48), '\0');
      for (char& b : junk) b = static_cast<char>(rng());
      send(c, junk);
    }
  }
  // The server still serves a well-behaved client.
  std::vector<float> values(8);
  client.pull("d", values.data(), 8)->wait(-1);
  client.ping(0)->wait(-1);
  server.stop(1000);
}

}  // namespace
