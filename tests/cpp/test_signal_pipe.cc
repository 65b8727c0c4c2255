// install_signal_pipe from many threads at once: one pipe, one byte per signal delivered.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "common/signal_pipe.h"

namespace pscore {
namespace {

constexpr int kThreads = 4;
constexpr int kSignalsPerThread = 8;

TEST(SignalPipe, ConcurrentInstallsShareOnePipeThatGetsEverySignal) {
  std::vector<int> fds(kThreads, -2);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&fds, t] {
      fds[t] = install_signal_pipe(SIGUSR2);
      for (int i = 0; i < kSignalsPerThread; ++i) ::raise(SIGUSR2);  // handled in this thread
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_GE(fds[0], 0);
  for (int fd : fds) EXPECT_EQ(fd, fds[0]);
  int received = 0;
  pollfd p{fds[0], POLLIN, 0};
  while (received < kThreads * kSignalsPerThread && ::poll(&p, 1, 5000) == 1) {
    char byte = 0;
    ASSERT_EQ(::read(fds[0], &byte, 1), 1);
    EXPECT_EQ(byte, static_cast<char>(SIGUSR2));
    ++received;
  }
  EXPECT_EQ(received, kThreads * kSignalsPerThread);
  EXPECT_EQ(::signal(SIGUSR1, SIG_IGN), SIG_DFL);
  EXPECT_EQ(install_signal_pipe(SIGUSR1), -1) << "an ignored signal must be left alone";
}

}  // namespace
}  // namespace pscore
