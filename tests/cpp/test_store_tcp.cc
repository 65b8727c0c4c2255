// TCPStore specifics: free and busy ports, clients before the master, many parked waiters, a
// server that drops connections speaking garbage while serving the others, and authentication.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/frame.h"
#include "common/socket.h"
#include "store/store_handshake.h"
#include "store/tcp_store.h"

namespace pscore {
namespace {

TCPStoreOptions master_options(int port = 0) {
  TCPStoreOptions o;
  o.port = port;
  o.is_master = true;
  o.timeout_ms = 5000;
  return o;
}

TCPStoreOptions client_options(int port, int64_t timeout_ms = 5000) {
  TCPStoreOptions o;
  o.port = port;
  o.timeout_ms = timeout_ms;
  return o;
}

int free_port() {
  Socket s = Socket::listen("127.0.0.1", 0);
  return s.local_port();
}

// Sends bytes on a fresh connection and reports whether the server closed it.
bool server_closes_after(int port, const std::string& bytes) {
  Socket s = Socket::connect("127.0.0.1", port, Deadline(2000), "test");
  s.send_all(bytes.data(), bytes.size(), Deadline(2000), "send junk");
  char buf[256];
  try {
    for (;;) s.recv_all(buf, 1, Deadline(3000), "drain");
  } catch (const NetworkError&) {
    return true;  // closed (or reset) by the server
  } catch (const TimeoutError&) {
    return false;
  }
}

std::string header(uint8_t type, uint64_t length, uint32_t magic = kFrameMagic) {
  FrameHeader h;
  h.magic = magic;
  h.type = type;
  h.seq = 1;
  h.length = length;
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

TEST(TcpStore, PortZeroPicksAFreePort) {
  TCPStore master(master_options());
  EXPECT_GT(master.port(), 0);
  TCPStore client(client_options(master.port()));
  client.set("k", "v");
  EXPECT_EQ(master.get("k"), "v");
}

TEST(TcpStore, BusyPortIsAClearError) {
  TCPStore master(master_options());
  try {
    TCPStore second(master_options(master.port()));
    FAIL() << "bound a busy port";
  } catch (const NetworkError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(":" + std::to_string(master.port())), std::string::npos) << msg;
    EXPECT_NE(msg.find("Address already in use"), std::string::npos) << msg;
  }
}

TEST(TcpStore, ClientBeforeMaster) {
  int port = free_port();
  std::string got;
  std::thread client([&] {
    TCPStore c(client_options(port, 10000));
    got = c.get("hello");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  TCPStore master(master_options(port));
  master.set("hello", "world");
  client.join();
  EXPECT_EQ(got, "world");
}

TEST(TcpStore, NoMasterTimesOut) {
  EXPECT_THROW(TCPStore(client_options(free_port(), 200)), TimeoutError);
}

TEST(TcpStore, WaitForWorkers) {
  int port = free_port();
  std::thread master_thread([&] {
    TCPStoreOptions o = master_options(port);
    o.world_size = 3;
    o.wait_for_workers = true;
    TCPStore master(o);
    master.wait({"worker_done"});
    EXPECT_EQ(master.num_keys(), 1);  // the join bookkeeping is not a user key
  });
  std::vector<std::unique_ptr<TCPStore>> workers;
  for (int i = 0; i < 2; ++i) {
    TCPStoreOptions o = client_options(port);
    o.world_size = 3;
    workers.push_back(std::make_unique<TCPStore>(o));
  }
  workers[0]->set("worker_done", "1");
  master_thread.join();
}

TEST(TcpStore, ManyParkedWaitersWakeOnOneSet) {
  TCPStore master(master_options());
  constexpr int kWaiters = 32;
  std::vector<std::thread> threads;
  std::atomic<int> woke{0};
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&] {
      TCPStore c(client_options(master.port()));
      c.wait({"go", "go2"});
      if (c.get("go2") == "2") woke++;
    });
  }
  master.set("go", "1");
  master.add("go2", 2);
  for (auto& t : threads) t.join();
  EXPECT_EQ(woke.load(), kWaiters);
}

TEST(TcpStore, ProtocolViolationsDropOnlyThatConnection) {
  TCPStore master(master_options());
  TCPStore good(client_options(master.port()));
  good.set("before", "1");
  std::vector<std::string> junk = {
      std::string("GET / HTTP/1.1\r\n\r\n") + std::string(100, '\x7f'),
      header(1, 1ull << 40),                              // oversized length
      header(1, 0, 0xdeadbeef),                           // bad magic
      header(200, 0),                                     // unknown op
      header(1, 4) + std::string("\xff\xff\xff\x00", 4),  // key longer than the payload
  };
  for (const auto& bytes : junk) EXPECT_TRUE(server_closes_after(master.port(), bytes));
  EXPECT_EQ(master.dropped_connections(), static_cast<int64_t>(junk.size()));
  EXPECT_EQ(good.get("before"), "1");
  // A parked waiter on another connection is still answered.
  std::thread waiter(
      [&] { EXPECT_EQ(TCPStore(client_options(master.port())).get("after"), "ok"); });
  good.set("after", "ok");
  waiter.join();
}

TEST(TcpStore, TruncatedFrameThenHangup) {
  TCPStore master(master_options());
  {
    Socket s = Socket::connect("127.0.0.1", master.port(), Deadline(2000), "test");
    std::string h = header(1, 100);
    s.send_all(h.data(), 10, Deadline(2000), "half a header");
  }
  TCPStore c(client_options(master.port()));
  c.set("k", "v");
  EXPECT_EQ(master.get("k"), "v");
}

TEST(TcpStore, MasterGoneIsANetworkError) {
  auto master = std::make_unique<TCPStore>(master_options());
  TCPStore c(client_options(master->port(), 300));
  c.set("a", "1");
  master.reset();
  EXPECT_THROW(c.get("a"), NetworkError);
  EXPECT_THROW(c.get("a"), TimeoutError);  // reconnecting is refused until the timeout
}

TCPStoreOptions with_token(TCPStoreOptions o, const std::string& token) {
  o.auth_token = token;
  return o;
}

std::string network_error(const TCPStoreOptions& o) {
  try {
    TCPStore s(o);
  } catch (const NetworkError& e) {
    return e.what();
  }
  return "(no NetworkError)";
}

TEST(TcpStoreAuth, SameTokenServesWrongOrMissingTokenIsRefused) {
  TCPStore master(with_token(master_options(), "s3cret"));
  TCPStore good(with_token(client_options(master.port()), "s3cret"));
  good.set("k", "v");
  EXPECT_EQ(master.get("k"), "v");
  std::string prefix = "authentication with store at 127.0.0.1:" + std::to_string(master.port()) +
                       " failed (wrong PSCORE_AUTH_TOKEN?)";
  std::string wrong = network_error(with_token(client_options(master.port()), "guess"));
  EXPECT_NE(wrong.find(prefix + ": the store could not prove"), std::string::npos) << wrong;
  std::string missing = network_error(client_options(master.port()));
  EXPECT_NE(missing.find(prefix + ": the store says: this store requires authentication"),
            std::string::npos)
      << missing;
  EXPECT_EQ(good.get("k"), "v");
}

TEST(TcpStoreAuth, TokenOnTheClientOnlyIsRefused) {
  TCPStore master(master_options());
  std::string msg = network_error(with_token(client_options(master.port()), "s3cret"));
  EXPECT_NE(msg.find("this store has no auth token, but the client has one"), std::string::npos)
      << msg;
}

TEST(TcpStoreAuth, OtherJobIsRefused) {
  TCPStoreOptions m = with_token(master_options(), "s3cret");
  m.job_id = "job-a";
  TCPStore master(m);
  TCPStoreOptions c = with_token(client_options(master.port()), "s3cret");
  c.job_id = "job-b";
  std::string msg = network_error(c);
  EXPECT_NE(msg.find("the client belongs to job 'job-b', this store serves job 'job-a'"),
            std::string::npos)
      << msg;
}

TEST(TcpStoreAuth, UnauthenticatedFramesAreCappedAndDataOpsRefused) {
  TCPStore master(with_token(master_options(), "s3cret"));
  // A frame larger than a handshake may be, before authenticating: dropped as a violation.
  EXPECT_TRUE(server_closes_after(master.port(), header(9, kMaxHandshakeBytes + 1)));
  EXPECT_EQ(master.dropped_connections(), 1);
  // A data op before authenticating: a kAuthFailed reply, then the server closes.
  Socket s = Socket::connect("127.0.0.1", master.port(), Deadline(2000), "test");
  std::string frame = header(8, 0);  // num_keys
  s.send_all(frame.data(), frame.size(), Deadline(2000), "send");
  FrameHeader h;
  s.recv_all(&h, sizeof(h), Deadline(2000), "reply");
  EXPECT_EQ(h.type, static_cast<uint8_t>(store_wire::Status::kAuthFailed));
  std::string payload(h.length, '\0');
  s.recv_all(payload.data(), payload.size(), Deadline(2000), "reply");
  EXPECT_NE(payload.find("requires authentication"), std::string::npos);
  char byte;
  EXPECT_THROW(s.recv_all(&byte, 1, Deadline(2000), "eof"), NetworkError);
  EXPECT_EQ(master.num_keys(), 0);
}

TEST(TcpStoreAuth, SilentServerIsATimeoutNotAHang) {
  Socket silent = Socket::listen("127.0.0.1", 0);  // the kernel accepts; nobody ever answers
  try {
    TCPStore c(with_token(client_options(silent.local_port(), 300), "s3cret"));
    FAIL() << "connected to a silent server";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("no answer to the handshake (hello) in time"),
              std::string::npos)
        << e.what();
  }
}

TEST(TcpStoreAuth, BindReachableFromOtherHostsNeedsTokenOrInsecure) {
  TCPStoreOptions o = master_options();
  o.bind_host = "0.0.0.0";
  EXPECT_THROW(TCPStore{o}, std::invalid_argument);
  o.insecure = true;
  EXPECT_NO_THROW(TCPStore{o});
  o.insecure = false;
  o.auth_token = "s3cret";
  EXPECT_NO_THROW(TCPStore{o});
}

}  // namespace
}  // namespace pscore
