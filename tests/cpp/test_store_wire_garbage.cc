// Truncated and garbage payloads fed to the store's decoders (handshake frames, key lists) and
// to a live TCPStore server for every op: each is an error or a dropped connection, never a
// crash or an out-of-bounds read (CI runs this under ASan), and the server keeps serving.
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
#include "store/store_handshake.h"
#include "store/store_protocol.h"
#include "store/tcp_store.h"

namespace pscore {
namespace {

using Decoder = std::function<void(const std::string& payload)>;

bool rejects(const Decoder& decode, const std::string& payload) {
  try {
    decode(payload);
  } catch (const NetworkError&) {
    return true;
  }
  return false;
}

// Every proper prefix of `valid` is rejected; random bytes and corruptions of `valid` either
// decode or are rejected. Each payload is its own exactly-sized string, so ASan sees overreads.
void fuzz(const std::string& what, const std::string& valid, const Decoder& decode) {
  ASSERT_FALSE(rejects(decode, valid)) << what << ": the valid encoding is rejected";
  for (size_t cut = 0; cut < valid.size(); ++cut)
    EXPECT_TRUE(rejects(decode, valid.substr(0, cut))) << what << ": a " << cut << "-byte prefix";
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string junk(rng() % (2 * valid.size() + 8), '\0');
    for (char& b : junk) b = static_cast<char>(rng());
    rejects(decode, junk);
    std::string corrupt = valid;
    for (int k = 0; k < 3; ++k) corrupt[rng() % corrupt.size()] = static_cast<char>(rng());
    rejects(decode, corrupt);
  }
}

TEST(StoreWireGarbage, HandshakeAndKeyListDecoders) {
  StoreHello hello;
  hello.authenticate = true;
  hello.job_id = "job";
  fuzz("hello", encode_hello(hello), [](const std::string& p) { decode_hello(p, "peer"); });
  StoreChallenge c;
  c.authenticate = true;
  fuzz("challenge", encode_challenge(c), [](const std::string& p) { decode_challenge(p, "peer"); });
  WireWriter<> keys;
  store_wire::write_keys(keys, {"a", "", "key-3"});
  fuzz("keys", keys.take(), [](const std::string& p) {
    WireReader r(p.data(), p.size(), "peer");
    store_wire::read_keys(r, "keys");
    r.finish();
  });
}

// Sends one request on a fresh connection; true when the server answered it, false when it
// dropped the connection.
bool answered(int port, store_wire::Op op, const std::string& payload) {
  Socket s = Socket::connect("127.0.0.1", port, Deadline(2000), "store");
  FrameHeader h;
  h.type = static_cast<uint8_t>(op);
  h.seq = 1;
  try {
    send_frame(s, h, payload, Deadline(2000), "request");
    recv_frame(s, store_wire::kMaxPayloadBytes, Deadline(5000), "store", "reply");
    return true;
  } catch (const NetworkError&) {
    return false;
  }
}

TEST(StoreWireGarbage, ServerDropsGarbageRequestsAndKeepsServing) {
  TCPStoreOptions mo;
  mo.is_master = true;
  mo.timeout_ms = 5000;
  TCPStore master(mo);
  master.set("k", "v");
  using store_wire::Op;
  WireWriter<> keys;
  store_wire::write_keys(keys, {"k"});
  struct Case {
    Op op;
    std::string payload;
    bool random;  // also random payloads (not for ops that park until a decoded timeout)
  };
  const std::vector<Case> cases = {
      {Op::kSet, WireWriter<>().string("k").string("v").take(), true},
      {Op::kGet, WireWriter<>().string("k").i64(100).take(), false},
      {Op::kAdd, WireWriter<>().string("n").i64(1).take(), true},
      {Op::kCompareSet, WireWriter<>().string("k").string("v").string("w").take(), true},
      {Op::kWait, WireWriter<>().i64(100).bytes(keys.out().data(), keys.out().size()).take(),
       false},
      {Op::kCheck, keys.out(), true},
      {Op::kDelete, WireWriter<>().string("gone").take(), true},
  };
  std::mt19937 rng(3);
  int64_t sent_garbage = 0, dropped = 0;
  for (const Case& c : cases) {
    EXPECT_TRUE(answered(master.port(), c.op, c.payload)) << store_wire::op_name(c.op);
    for (size_t cut = 0; cut < c.payload.size(); ++cut) {
      ++sent_garbage;
      if (!answered(master.port(), c.op, c.payload.substr(0, cut))) ++dropped;
    }
    if (!c.random) continue;
    for (int i = 0; i < 30; ++i) {
      std::string junk(rng() % (c.payload.size() + 16), '\0');
      for (char& b : junk) b = static_cast<char>(rng());
      answered(master.port(), c.op, junk);
    }
  }
  EXPECT_EQ(dropped, sent_garbage);  // every truncated request dropped its connection
  TCPStoreOptions co;
  co.port = master.port();
  co.timeout_ms = 5000;
  TCPStore client(co);
  client.set("after", "ok");
  EXPECT_EQ(client.get("after"), "ok");
}

}  // namespace
}  // namespace pscore
