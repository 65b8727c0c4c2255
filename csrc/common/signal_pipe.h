// A signal turned into a byte on a pipe: the handler only write()s (async-signal-safe), and a
// thread reading the pipe answers the signal even while every other thread is blocked.
#pragma once

namespace pscore {

// Installs a handler for `signum` when the signal has its default disposition and returns the
// pipe's read end (close-on-exec, blocking), one byte per delivery; the same fd while this
// function's handler is installed; -1 when the signal has another handler (or is ignored),
// which is left alone. A signal given back its default disposition (a forked child does so)
// gets a new pipe. Thread-safe. Throws std::system_error when the pipe or sigaction fails.
int install_signal_pipe(int signum);

}  // namespace pscore
