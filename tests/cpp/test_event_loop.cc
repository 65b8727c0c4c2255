// The shared event loop (common/event_loop.h): readiness callbacks, posted tasks, timers, stop
// from another thread, and removal from inside callbacks.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/event_loop.h"

namespace pscore {
namespace {

// A connected pair of non-blocking stream sockets, closed at the end of the test.
struct SocketPair {
  int a = -1, b = -1;
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~SocketPair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
};

void send_byte(int fd) { ASSERT_EQ(::write(fd, "x", 1), 1); }

std::string drain(int fd) {
  std::string got;
  char buf[64];
  ssize_t k;
  while ((k = ::read(fd, buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(k));
  return got;
}

// Runs the loop on a thread of its own; stops and joins it at the end.
class LoopThread {
 public:
  explicit LoopThread(EventLoop& loop) : loop_(loop), thread_([&loop] { loop.run(); }) {}
  ~LoopThread() { stop(); }
  void stop() {
    loop_.stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  EventLoop& loop_;
  std::thread thread_;
};

TEST(EventLoop, ReadableFdCallsItsHandlerWithTheEvents) {
  EventLoop loop("test loop");
  SocketPair p;
  std::promise<std::pair<uint32_t, std::string>> got;
  loop.add(p.a, EPOLLIN, [&](uint32_t events) {
    got.set_value({events, drain(p.a)});
    loop.remove(p.a);
  });
  LoopThread t(loop);
  send_byte(p.b);
  auto [events, data] = got.get_future().get();
  EXPECT_TRUE(events & EPOLLIN);
  EXPECT_EQ(data, "x");
}

TEST(EventLoop, ModifyFromAnotherThreadArmsWritability) {
  EventLoop loop("test loop");
  SocketPair p;
  std::promise<uint32_t> writable;
  std::atomic<int> calls{0};
  loop.add(p.a, 0, [&](uint32_t events) {
    if (calls++ == 0) writable.set_value(events);
    loop.modify(p.a, 0);
  });
  LoopThread t(loop);
  loop.modify(p.a, EPOLLOUT);
  EXPECT_TRUE(writable.get_future().get() & EPOLLOUT);
}

TEST(EventLoop, PostedTasksRunOnTheLoopThreadInOrder) {
  EventLoop loop("test loop");
  LoopThread t(loop);
  std::vector<int> order;
  std::promise<std::thread::id> done;
  for (int i = 0; i < 100; ++i) loop.post([&order, i] { order.push_back(i); });
  loop.post([&] { done.set_value(std::this_thread::get_id()); });
  EXPECT_NE(done.get_future().get(), std::this_thread::get_id());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(EventLoop, TaskPostedByATaskRunsWithoutAnotherWakeup) {
  EventLoop loop("test loop");
  std::promise<void> second;
  loop.post([&] { loop.post([&] { second.set_value(); }); });
  LoopThread t(loop);
  EXPECT_EQ(second.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
}

TEST(EventLoop, TimersFireInDeadlineOrderAndCancelledOnesNever) {
  EventLoop loop("test loop");
  std::vector<int> fired;
  std::promise<void> last;
  const auto now = Clock::now();
  loop.add_timer(now + std::chrono::milliseconds(30), [&] {
    fired.push_back(3);
    last.set_value();
  });
  loop.add_timer(now + std::chrono::milliseconds(10), [&] { fired.push_back(2); });
  auto cancelled = loop.add_timer(now + std::chrono::milliseconds(5), [&] { fired.push_back(9); });
  loop.add_timer(now - std::chrono::milliseconds(1), [&] { fired.push_back(1); });  // past
  loop.cancel_timer(cancelled);
  LoopThread t(loop);
  last.get_future().wait();
  t.stop();
  EXPECT_EQ(fired, (std::vector<int>{1, 2, 3}));
  EXPECT_GE(Clock::now() - now, std::chrono::milliseconds(30));
}

TEST(EventLoop, StopFromAnotherThreadEndsAnIdleRun) {
  EventLoop loop("test loop");
  auto ran = std::async(std::launch::async, [&] { loop.run(); });
  loop.stop();
  EXPECT_EQ(ran.wait_for(std::chrono::seconds(30)), std::future_status::ready);
}

TEST(EventLoop, StopBeforeRunReturnsAtOnce) {
  EventLoop loop("test loop");
  loop.stop();
  loop.run();
}

// Two sockets become readable in the same turn; the first callback removes the other's
// registration and closes it, and a new socket reuses its number: the stale event must reach
// neither the removed handler nor the new one.
TEST(EventLoop, RemoveInsideACallbackSuppressesEventsOfThatTurn) {
  EventLoop loop("test loop");
  SocketPair p, q;
  send_byte(p.b);
  send_byte(q.b);
  std::atomic<int> first_calls{0}, stale_calls{0}, reused_calls{0};
  int reused_fd = -1;
  auto on_first = [&](int self, int other) {
    ++first_calls;
    drain(self);
    loop.remove(self);
    loop.remove(other);
    ::close(other);
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    ::close(fds[1]);  // fds[0] is readable (end of stream): it would be called if not fenced
    if (fds[0] != other) {
      ASSERT_EQ(::dup2(fds[0], other), other);
      ::close(fds[0]);
    }
    reused_fd = other;
    loop.add(other, EPOLLIN, [&](uint32_t) {
      ++reused_calls;
      loop.remove(reused_fd);
    });
  };
  // Whichever is reported first removes the other.
  loop.add(p.a, EPOLLIN, [&](uint32_t) {
    if (first_calls == 0) return on_first(p.a, q.a);
    ++stale_calls;
  });
  loop.add(q.a, EPOLLIN, [&](uint32_t) {
    if (first_calls == 0) return on_first(q.a, p.a);
    ++stale_calls;
  });
  std::promise<std::pair<int, int>> after_first_turn;
  // Posted tasks run after the turn's callbacks: this one sees the first turn's outcome.
  loop.post([&] { after_first_turn.set_value({stale_calls.load(), reused_calls.load()}); });
  LoopThread t(loop);
  auto [stale, reused] = after_first_turn.get_future().get();
  t.stop();
  EXPECT_EQ(first_calls, 1);
  EXPECT_EQ(stale, 0);
  EXPECT_EQ(reused, 0);
  ::close(reused_fd);
  if (reused_fd == p.a) p.a = -1;
  if (reused_fd == q.a) q.a = -1;
}

TEST(EventLoop, AddingABadFdNamesTheLoopAndTheOperation) {
  EventLoop loop("test loop");
  try {
    loop.add(-1, EPOLLIN, [](uint32_t) {});
    FAIL() << "expected NetworkError";
  } catch (const NetworkError& e) {
    EXPECT_NE(std::string(e.what()).find("test loop: epoll_ctl add"), std::string::npos)
        << e.what();
  }
}

TEST(EventLoop, ManyThreadsPostWhileTheLoopRuns) {
  EventLoop loop("test loop");
  LoopThread t(loop);
  std::atomic<int> ran{0};
  std::vector<std::thread> posters;
  for (int i = 0; i < 4; ++i)
    posters.emplace_back([&] {
      for (int k = 0; k < 1000; ++k) loop.post([&] { ++ran; });
    });
  for (auto& p : posters) p.join();
  std::promise<void> flushed;
  loop.post([&] { flushed.set_value(); });
  flushed.get_future().wait();
  EXPECT_EQ(ran.load(), 4000);
}

}  // namespace
}  // namespace pscore
