#include "common/signal_pipe.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <system_error>

namespace pscore {
namespace {

constexpr int kMaxSignal = 65;
std::atomic<int> write_fds[kMaxSignal];  // per signal: the pipe's write end, 0 when none

void on_signal(int signum) {
  const int saved = errno;
  int fd = signum > 0 && signum < kMaxSignal ? write_fds[signum].load() : 0;
  if (fd > 0) {
    const char byte = static_cast<char>(signum);
    ssize_t ignored = write(fd, &byte, 1);  // a full pipe already holds a pending request
    (void)ignored;
  }
  errno = saved;
}

[[noreturn]] void fail(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

}  // namespace

int install_signal_pipe(int signum) {
  static std::mutex mu;
  static std::map<int, int> read_fds;
  if (signum <= 0 || signum >= kMaxSignal) fail("install_signal_pipe: bad signal number");
  std::lock_guard<std::mutex> lock(mu);
  struct sigaction current{};
  if (sigaction(signum, nullptr, &current) != 0) fail("sigaction");
  const bool default_action = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
  const bool ours = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == on_signal;
  auto found = read_fds.find(signum);
  if (ours && found != read_fds.end()) return found->second;
  if (!default_action) return -1;
  if (found != read_fds.end()) {  // a forked child's copy of its parent's pipe, given back
    close(found->second);
    close(write_fds[signum].exchange(0));
    read_fds.erase(found);
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) fail("pipe2");
  if (fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0) fail("fcntl");
  write_fds[signum].store(fds[1]);
  struct sigaction action{};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(signum, &action, nullptr) != 0) fail("sigaction");
  read_fds[signum] = fds[0];
  return fds[0];
}

}  // namespace pscore
