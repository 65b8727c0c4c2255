// A signal turned into a byte on a pipe: the handler only write()s (async-signal-safe), and a
// thread reading the pipe answers the signal even while every other thread is blocked.
#pragma once

namespace pscore {

// Installs a handler for `signum` when the signal still has its default disposition and returns
// the pipe's read end (close-on-exec, blocking), one byte per delivery; the same fd when already
// installed by this function; -1 when the signal has another handler (or is ignored), which is
// left alone. Thread-safe. Throws std::system_error when the pipe or sigaction fails.
int install_signal_pipe(int signum);

}  // namespace pscore
