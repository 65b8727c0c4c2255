// Releases the GIL around a blocking call, in a way that survives interpreter exit. Every module
// uses this instead of py::gil_scoped_release.
//
// Once the interpreter is finalizing, CPython before 3.14 ends any other thread that takes the
// GIL back with pthread_exit, which unwinds that thread's stack. gil_scoped_release takes the
// GIL back in a noexcept destructor, and unwinding out of a noexcept frame is std::terminate:
// "terminate called without an active exception", a SIGABRT at exit whenever a Python daemon
// thread (the torch backend's completer, a user's thread) returned from a pscore call while the
// main thread was exiting. Here the destructor may throw, so the unwind ends the thread the way
// it ends a daemon thread blocked in pure Python.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <exception>
#include <thread>

namespace pscore::bindings {

class GilRelease {
 public:
  GilRelease() : exceptions_(std::uncaught_exceptions()), state_(PyEval_SaveThread()) {}
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

  // Takes the GIL back. In a finalizing interpreter this ends the thread (see above), unless
  // the call is unwinding with an error already: a second unwind would terminate, so the thread
  // sleeps until the process is gone instead (it must not run Python again either way).
  ~GilRelease() noexcept(false) {
    if (std::uncaught_exceptions() == exceptions_) {
      PyEval_RestoreThread(state_);
      return;
    }
    try {
      PyEval_RestoreThread(state_);
    } catch (...) {  // the thread's end (a forced unwind); nothing else is thrown from C
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
  }

 private:
  int exceptions_;
  PyThreadState* state_;
};

// For .def(..., ReleaseGil()): the bound call runs without the GIL.
using ReleaseGil = pybind11::call_guard<GilRelease>;

}  // namespace pscore::bindings
