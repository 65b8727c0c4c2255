// The parameter server over loopback with clients on threads: round trips, sync rounds with
// several workers, exactly-once retries, recovery from the log, and hostile connections.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/frame.h"
#include "common/socket.h"
#include "ps/client/ps_client.h"
#include "ps/server/ps_server.h"
#include "ps/wire/ps_handshake.h"
#include "ps/wire/ps_protocol.h"

using namespace pscore;
using namespace pscore::ps;

namespace {

struct Cluster {
  std::vector<std::unique_ptr<PsServer>> servers;
  Cluster(int shards, int workers, const std::string& token = "", const std::string& dir = "",
          const SnapshotPolicy& snapshots = {}) {
    for (int s = 0; s < shards; ++s) {
      ServerOptions o;
      o.shard = s;
      o.num_shards = shards;
      o.num_workers = workers;
      o.auth_token = token;
      o.recover_dir = dir;
      o.snapshots = snapshots;
      o.log_connections = false;
      servers.push_back(std::make_unique<PsServer>(o));
      servers.back()->start();
    }
  }
  std::unique_ptr<PsClient> client(int worker, const std::string& token = "") {
    ClientOptions o;
    o.worker = worker;
    o.auth_token = token;
    o.timeout_ms = 20000;
    auto c = std::make_unique<PsClient>(o, static_cast<int>(servers.size()));
    for (size_t s = 0; s < servers.size(); ++s)
      c->connect(static_cast<int>(s), "127.0.0.1", servers[s]->port());
    return c;
  }
};

TableSpec dense_spec(const std::string& name, int64_t n, double lr) {
  TableSpec s;
  s.name = name;
  s.shape = {n};
  s.optimizer.lr = lr;
  return s;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/pscore_ps_srv_XXXXXX";
  return mkdtemp(tmpl);
}

}  // namespace

TEST(PsServer, DensePushPullOverThreeShards) {
  Cluster cl(3, 1);
  auto c = cl.client(0);
  const int64_t n = 300000;
  std::vector<float> init(n), out(n), g(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) init[i] = static_cast<float>(i % 1000);
  TableLayout l = c->create_table(dense_spec("w", n, 0.5), init.data(), n);
  EXPECT_EQ(l.parts.size(), 3u);
  c->push_pull("w", g.data(), out.data(), n)->wait(-1);
  for (int64_t i = 0; i < n; i += 997) EXPECT_FLOAT_EQ(out[i], init[i] - 0.5f);
  EXPECT_THROW(c->push("w", g.data(), n - 1), std::invalid_argument);
  EXPECT_THROW(c->lookup_table("nope"), TableNotFound);
}

TEST(PsServer, SyncRoundAveragesAllWorkers) {
  Cluster cl(2, 3);
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> results(3, std::vector<float>(100000));
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      auto c = cl.client(w);
      TableSpec s = dense_spec("w", 100000, 1.0);
      s.consistency.mode = Consistency::kSync;
      c->create_table(s, nullptr, 0);
      std::vector<float> g(100000, static_cast<float>(w + 1));
      for (int step = 0; step < 3; ++step)
        c->push_pull("w", g.data(), results[w].data(), 100000)->wait(-1);
      EXPECT_EQ(c->table_step("w"), 3);
    });
  }
  for (auto& t : threads) t.join();
  // Each round applies the mean gradient (1 + 2 + 3) / 3 = 2 once.
  for (int w = 0; w < 3; ++w) EXPECT_FLOAT_EQ(results[w][12345], -6.0f);
}

TEST(PsServer, RetriedPushIsAppliedOnceAndRecoveredFromTheLog) {
  std::string dir = temp_dir();
  std::vector<float> g(1000, 1.0f), out(1000);
  {
    Cluster cl(1, 1, "", dir);
    auto c = cl.client(0);
    c->create_table(dense_spec("w", 1000, 1.0), nullptr, 0);
    for (int i = 0; i < 4; ++i) c->push("w", g.data(), 1000)->wait(-1);
    cl.servers[0]->shard().save(dir);  // snapshot, then more updates only in the log
    for (int i = 0; i < 3; ++i) c->push("w", g.data(), 1000)->wait(-1);
  }  // servers stop; state lives on in dir
  Cluster cl(1, 1, "", dir);
  EXPECT_EQ(cl.servers[0]->replayed_records(), 3u);
  auto c = cl.client(0);
  c->pull("w", out.data(), 1000)->wait(-1);
  EXPECT_FLOAT_EQ(out[0], -7.0f);

  // A raw connection sends the same push (same worker, same sequence number) twice.
  Socket s = Socket::connect("127.0.0.1", cl.servers[0]->port(), Deadline(5000), "server");
  ClientHandshake hs{0, "", "", "server"};
  client_handshake(s, hs, Deadline(5000));
  PushHeader ph;
  ph.seq = uint64_t(1) << 62;
  std::vector<uint8_t> frame(sizeof(FrameHeader) + sizeof(ph) + 4000);
  FrameHeader h;
  h.type = static_cast<uint8_t>(MsgType::kPushDense);
  h.tag = table_id_for("w");
  h.length = sizeof(ph) + 4000;
  std::memcpy(frame.data(), &h, sizeof(h));
  std::memcpy(frame.data() + sizeof(h), &ph, sizeof(ph));
  std::memcpy(frame.data() + sizeof(h) + sizeof(ph), g.data(), 4000);
  for (int copy = 0; copy < 2; ++copy) {
    s.send_all(frame.data(), frame.size(), Deadline(5000), "push");
    FrameHeader rh;
    PushReply r;
    s.recv_all(&rh, sizeof(rh), Deadline(5000), "reply");
    ASSERT_EQ(rh.type, static_cast<uint8_t>(MsgType::kReply));
    s.recv_all(&r, sizeof(r), Deadline(5000), "reply");
    EXPECT_EQ(r.status,
              static_cast<uint8_t>(copy == 0 ? PushStatus::kApplied : PushStatus::kDuplicate));
  }
  c->pull("w", out.data(), 1000)->wait(-1);
  EXPECT_FLOAT_EQ(out[0], -8.0f);
}

TEST(PsServer, HostileConnectionsAreDroppedAndOthersServed) {
  Cluster cl(1, 1, "sekrit");
  const int port = cl.servers[0]->port();
  auto raw = [&](const std::string& bytes) {
    Socket s = Socket::connect("127.0.0.1", port, Deadline(5000), "server");
    s.send_all(bytes.data(), bytes.size(), Deadline(5000), "raw");
    char c;
    // The server closes the connection: recv sees EOF (or a reset).
    EXPECT_THROW(s.recv_all(&c, 1, Deadline(5000), "raw"), NetworkError);
  };
  raw(std::string(64, 'G'));  // garbage
  FrameHeader h;
  h.type = static_cast<uint8_t>(MsgType::kHello);
  h.length = uint64_t(1) << 40;  // oversized length field
  raw(std::string(reinterpret_cast<const char*>(&h), sizeof(h)));
  {
    ClientOptions o;
    o.auth_token = "wrong";
    PsClient bad(o, 1);
    EXPECT_THROW(bad.connect(0, "127.0.0.1", port), pscore::Error);
  }
  auto c = cl.client(0, "sekrit");
  c->ping(0)->wait(-1);
  std::string stats = cl.servers[0]->stats_json();
  EXPECT_NE(stats.find("\"auth_failures\":1"), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"dropped_connections\":3"), std::string::npos) << stats;
}

// What a client with `token` hears from the server on `port` ("" when it is served).
std::string refusal(int port, const std::string& token) {
  ClientOptions o;
  o.auth_token = token;
  PsClient c(o, 1);
  try {
    c.connect(0, "127.0.0.1", port);
  } catch (const pscore::Error& e) {
    return e.what();
  }
  return "";
}

TEST(PsServer, TellsEachClientWhyItsTokenIsRefused) {
  Cluster cl(1, 1, "sekrit");
  const int port = cl.servers[0]->port();
  EXPECT_NE(refusal(port, "").find("refused the connection: this parameter server requires "
                                   "authentication: set PSCORE_AUTH_TOKEN"),
            std::string::npos);
  EXPECT_NE(refusal(port, "wrong")
                .find("could not prove it knows this process's token (wrong PSCORE_AUTH_TOKEN?)"),
            std::string::npos);
  Cluster open(1, 1);
  EXPECT_NE(refusal(open.servers[0]->port(), "sekrit")
                .find("this parameter server has no auth token, but the client has one"),
            std::string::npos);
}

TEST(PsServer, RefusesPublicBindWithoutToken) {
  ServerOptions o;
  o.host = "0.0.0.0";
  PsServer s(o);
  EXPECT_THROW(s.start(), std::invalid_argument);
}

TEST(PsServer, SparseRowsOverShardsSyncAndCheckpoint) {
  std::string dir = temp_dir();
  Cluster cl(3, 2);
  std::vector<std::thread> threads;
  const int64_t n = 500, dim = 8;
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = (i % 250) * 1000003 - 77;  // every id twice
  std::vector<std::vector<float>> outs(2, std::vector<float>(n * dim));
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      auto c = cl.client(w);
      TableSpec s;
      s.name = "emb";
      s.kind = TableKind::kSparse;
      s.shape = {dim};
      s.optimizer.lr = 1.0;
      s.optimizer.kind = OptimizerKind::kAdagrad;
      s.optimizer.eps = 1e-10;
      s.consistency.mode = Consistency::kSync;
      c->create_table(s, nullptr, 0);
      std::vector<float> g(n * dim, 1.0f);
      for (int step = 0; step < 2; ++step)
        c->push_pull_sparse("emb", ids.data(), g.data(), outs[w].data(), n)->wait(-1);
    });
  }
  for (auto& t : threads) t.join();
  // Each id gets 2 per worker per step (duplicates summed), averaged over the 2 workers: 2.
  // Adagrad with lr 1: -1 after the first step, -1 - 2/sqrt(8) after the second.
  const float expect = -1.0f - 2.0f / std::sqrt(8.0f);
  for (int w = 0; w < 2; ++w)
    for (int64_t i = 0; i < n * dim; i += 37) EXPECT_NEAR(outs[w][i], expect, 1e-5);
  auto c = cl.client(0);
  c->create_table(c->lookup_table("emb").spec, nullptr, 0);  // joining learns the open round
  EXPECT_EQ(c->table_step("emb"), 2);
  c->save(dir)->wait(-1);
  std::vector<float> g(n * dim, 100.0f), after(n * dim), reloaded(n * dim);
  c->worker_done()->wait(-1);  // worker 1 is idle: let rounds close with worker 0 alone
  c->push_sparse("emb", ids.data(), g.data(), n)->wait(-1);
  c->pull_sparse("emb", ids.data(), after.data(), n)->wait(-1);
  EXPECT_GT(std::abs(after[0] - expect), 0.1f);
  c->load(dir)->wait(-1);
  c->pull_sparse("emb", ids.data(), reloaded.data(), n)->wait(-1);
  EXPECT_NEAR(reloaded[0], expect, 1e-5);
}

TEST(PsServer, SspParksAWorkerTooFarAhead) {
  Cluster cl(2, 2);
  auto fast = cl.client(0);
  auto slow = cl.client(1);
  TableSpec s = dense_spec("ssp", 200000, 1.0);
  s.consistency.mode = Consistency::kSsp;
  s.consistency.staleness = 1;
  fast->create_table(s, nullptr, 0);
  std::vector<float> g(200000, 1.0f);
  fast->push("ssp", g.data(), 200000)->wait(-1);      // clock 1 vs 0: within the bound
  auto second = fast->push("ssp", g.data(), 200000);  // clock 2 vs 0: parked
  EXPECT_FALSE(second->wait(100));
  slow->push("ssp", g.data(), 200000)->wait(-1);
  EXPECT_TRUE(second->wait(20000));
}

TEST(PsServer, UnreadRepliesPauseTheConnectionWithBoundedMemory) {
  ServerOptions o;
  o.max_queued_requests = 4;
  o.max_outbox_bytes = 8 << 20;
  o.log_connections = false;
  PsServer server(o);
  server.start();
  ClientOptions co;
  PsClient c(co, 1);
  c.connect(0, "127.0.0.1", server.port());
  const int64_t n = 1 << 20;  // 4 MB replies
  std::vector<float> init(n, 3.0f);
  c.create_table(dense_spec("big", n, 1.0), init.data(), n);

  // A raw client asks for 40 pulls and reads nothing: the server stops handling once 8 MB of
  // replies wait, then stops reading once 4 requests wait.
  Socket s = Socket::connect("127.0.0.1", server.port(), Deadline(5000), "server");
  client_handshake(s, ClientHandshake{0, "", "", "server"}, Deadline(5000));
  for (int i = 0; i < 40; ++i) {
    FrameHeader h;
    h.type = static_cast<uint8_t>(MsgType::kPullDense);
    h.tag = table_id_for("big");
    h.seq = static_cast<uint64_t>(i);
    s.send_all(&h, sizeof(h), Deadline(5000), "pull");
  }
  std::string stats;
  for (int tries = 0; tries < 500; ++tries) {  // until the server has paused (up to 5 s)
    stats = server.stats_json();
    if (stats.find("\"queue_depth\":4,") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(stats.find("\"queue_depth\":4,"), std::string::npos) << stats;
  auto at = stats.find("\"reply_bytes_queued\":");
  ASSERT_NE(at, std::string::npos);
  uint64_t queued = std::stoull(stats.substr(at + 21));
  EXPECT_LE(queued, (8u << 20) + (4u << 20) + 64);  // the cap plus the reply that crossed it
  c.ping(0)->wait(-1);                              // other connections are still served
  std::vector<float> out(n);
  for (int i = 0; i < 40; ++i) {  // now read everything: all 40 replies arrive, in order
    FrameHeader h;
    s.recv_all(&h, sizeof(h), Deadline(20000), "reply");
    const uint64_t seq = h.seq, length = h.length;  // packed: copy before comparing
    ASSERT_EQ(seq, static_cast<uint64_t>(i));
    ASSERT_EQ(length, static_cast<uint64_t>(n) * 4);
    s.recv_all(out.data(), length, Deadline(20000), "reply");
    ASSERT_EQ(out[n - 1], 3.0f);
  }
}

TEST(PsServer, AutoSnapshotsKeepTheLogBoundedAndLoseNoPush) {
  // Three workers push 16 KB gradients with no snapshot asked for: the policy snapshots at
  // 64 KB of log, and requests wait at twice that, so the log never holds more than 128 KB
  // plus the records of the requests admitted before the wait (one per handler thread and the
  // event loop).
  const std::string dir = temp_dir();
  SnapshotPolicy policy;
  policy.log_min_bytes = 64 << 10;
  const int64_t n = 4096;
  const uint64_t record = n * 4 + 256;
  const int pushes = 150;
  {
    Cluster cl(1, 3, "", dir, policy);
    auto creator = cl.client(0);
    creator->create_table(dense_spec("w", n, 1.0), nullptr, 0);
    const uint64_t due = policy.due_bytes(cl.servers[0]->shard().snapshot_bytes() + record);
    std::atomic<uint64_t> largest{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < 3; ++w)
      workers.emplace_back([&, w] {
        auto c = cl.client(w);
        std::vector<float> g(n, 1.0f);
        for (int i = 0; i < pushes; ++i) {
          c->push("w", g.data(), n)->wait(-1);
          uint64_t now = cl.servers[0]->shard().log_bytes(), seen = largest.load();
          while (now > seen && !largest.compare_exchange_weak(seen, now)) {
          }
        }
      });
    for (auto& t : workers) t.join();
    EXPECT_LE(largest.load(), 2 * due + 3 * record);
    EXPECT_GE(cl.servers[0]->snapshots_written(), 10u);
  }
  Cluster cl(1, 3, "", dir, policy);
  std::vector<float> out(n);
  cl.client(0)->pull("w", out.data(), n)->wait(-1);
  EXPECT_FLOAT_EQ(out[0], -3.0f * pushes);
  EXPECT_FLOAT_EQ(out[n - 1], -3.0f * pushes);
}

TEST(PsServer, DropAndListTablesAcrossShardsAndRecovery) {
  const std::string dir = temp_dir();
  {
    Cluster cl(2, 1, "", dir);
    auto c = cl.client(0);
    c->create_table(dense_spec("w", 100000, 1.0), nullptr, 0);
    TableSpec e = dense_spec("e", 0, 1.0);
    e.kind = TableKind::kSparse;
    e.shape = {8};
    c->create_table(e, nullptr, 0);
    ASSERT_EQ(c->list_tables().size(), 2u);
    c->drop_table("w");
    auto left = c->list_tables();
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0].spec.name, "e");
    std::vector<float> g(100000, 1.0f);
    EXPECT_THROW(c->push("w", g.data(), 100000), TableNotFound);
    EXPECT_THROW(c->drop_table("w"), TableNotFound);
    c->create_table(dense_spec("w", 10, 1.0), nullptr, 0);  // the name again, other settings
    c->push("w", g.data(), 10)->wait(-1);
  }
  Cluster cl(2, 1, "", dir);  // replays the log: create, drop, create again
  auto c = cl.client(0);
  EXPECT_EQ(c->list_tables().size(), 2u);
  std::vector<float> out(10);
  c->pull("w", out.data(), 10)->wait(-1);
  EXPECT_FLOAT_EQ(out[9], -1.0f);
}

TEST(PsServer, StopGivesUpOnASnapshotStuckOnTheDisk) {
  // The snapshot's temp file is a FIFO nobody reads: opening it blocks, as a stuck disk would.
  const std::string dir = temp_dir();
  const std::string fifo =
      dir + "/shard-00000-of-00001.safetensors.tmp." + std::to_string(getpid());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  SnapshotPolicy policy;
  policy.log_min_bytes = 4096;
  policy.stop_timeout_ms = 200;
  auto cl = std::make_unique<Cluster>(1, 1, "", dir, policy);
  auto c = cl->client(0);
  c->create_table(dense_spec("w", 1024, 1.0), nullptr, 0);
  std::vector<float> g(1024, 1.0f);
  c->push("w", g.data(), 1024)->wait(-1);  // the log passes 4 KB (not 8: no request waits)
  c->push("w", g.data(), 1024)->wait(-1);  // asks for a snapshot, which blocks on the FIFO
  Deadline started(10000);
  while (!cl->servers[0]->snapshot_in_progress() && !started.expired())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(cl->servers[0]->snapshot_in_progress());
  // The log is at twice the bound: a push would wait for the snapshot, reads do not.
  ASSERT_GE(cl->servers[0]->shard().log_bytes(), 2 * policy.log_min_bytes);
  std::vector<float> out(1024);
  c->pull("w", out.data(), 1024)->wait(-1);
  EXPECT_FLOAT_EQ(out[0], -2.0f);
  c->stats()->wait(-1);
  try {
    cl->servers[0]->stop(0);
    ADD_FAILURE() << "stop() returned while the snapshot was stuck";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("is still being written after 200 ms"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(cl->servers[0]->running());
  std::thread reader([&] {  // unsticks the snapshot (whose fsync then fails on the FIFO)
    int fd = ::open(fifo.c_str(), O_RDONLY);
    char buf[65536];
    while (fd >= 0 && ::read(fd, buf, sizeof(buf)) > 0) {
    }
    if (fd >= 0) ::close(fd);
  });
  c.reset();
  cl.reset();  // joins the snapshot thread once its write ends
  reader.join();
}
