// EpollSet: wakes for the sockets a wait asks for, not for ones an earlier wait asked for,
// honours its timeout, and wakes when a wanted socket's peer hangs up.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "transport/tcp/epoll_set.h"

namespace pscore {
namespace {

struct Pair {
  int a = -1, b = -1;
  Pair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, &a), 0); }
  ~Pair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
};

int64_t elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0)
      .count();
}

TEST(EpollSet, WakesWhenAWantedSocketBecomesReadable) {
  Pair p;
  EpollSet set;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(::write(p.b, "x", 1), 1);
  });
  auto t0 = std::chrono::steady_clock::now();
  set.wait({pollfd{p.a, POLLIN, 0}}, 5000);
  writer.join();
  EXPECT_LT(elapsed_ms(t0), 4000);
  char c;
  EXPECT_EQ(::read(p.a, &c, 1), 1);
}

TEST(EpollSet, TimesOutWhenNothingIsReady) {
  Pair p;
  EpollSet set;
  auto t0 = std::chrono::steady_clock::now();
  set.wait({pollfd{p.a, POLLIN, 0}}, 100);
  EXPECT_GE(elapsed_ms(t0), 90);
}

TEST(EpollSet, ASocketNoLongerWantedDoesNotWakeTheWait) {
  Pair stale, wanted;
  EpollSet set;
  ASSERT_EQ(::write(wanted.b, "x", 1), 1);
  set.wait({pollfd{stale.a, POLLIN, 0}, pollfd{wanted.a, POLLIN, 0}}, 1000);  // ready at once
  EXPECT_EQ(set.armed(), 2u);
  char c;
  ASSERT_EQ(::read(wanted.a, &c, 1), 1);
  ASSERT_EQ(::write(stale.b, "y", 1), 1);  // readable, but the next wait does not ask for it
  auto t0 = std::chrono::steady_clock::now();
  set.wait({pollfd{wanted.a, POLLIN, 0}}, 200);
  EXPECT_GE(elapsed_ms(t0), 180) << "woke for a socket nobody waited for";
  EXPECT_EQ(set.armed(), 1u) << "the stale socket was disarmed";
  set.wait({pollfd{stale.a, POLLIN, 0}}, 1000);  // asked for again: re-registered, wakes
  EXPECT_EQ(set.armed(), 2u);
}

TEST(EpollSet, WritableAndHungUpSocketsWake) {
  Pair p;
  EpollSet set;
  auto t0 = std::chrono::steady_clock::now();
  set.wait({pollfd{p.a, POLLOUT, 0}}, 5000);  // an empty send buffer is writable at once
  EXPECT_LT(elapsed_ms(t0), 4000);
  ::close(p.b);
  p.b = -1;
  t0 = std::chrono::steady_clock::now();
  set.wait({pollfd{p.a, POLLIN, 0}}, 5000);
  EXPECT_LT(elapsed_ms(t0), 4000);
}

TEST(EpollSet, ChangingTheEventsOfARegisteredSocket) {
  Pair p;
  EpollSet set;
  set.wait({pollfd{p.a, POLLOUT, 0}}, 1000);
  auto t0 = std::chrono::steady_clock::now();
  set.wait({pollfd{p.a, POLLIN, 0}}, 150);  // writable still, but now only reads are wanted
  EXPECT_GE(elapsed_ms(t0), 130);
}

}  // namespace
}  // namespace pscore
