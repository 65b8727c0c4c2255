// The exception hierarchy every layer throws; bindings map it onto Python's built-in classes.
#pragma once

#include <stdexcept>
#include <string>

namespace pscore {

// Base of every pscore failure that is not a bad argument (those are std::invalid_argument).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A blocking call ran past its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer died, closed its connection or sent bytes that are not a pscore frame.
class NetworkError : public Error {
 public:
  using Error::Error;
};

// A store refused or failed an operation.
class StoreError : public Error {
 public:
  using Error::Error;
};

// An argument of an element type the operation cannot apply to (a bitwise reduction of floats):
// Python's TypeError.
class DTypeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Builds "what: strerror(errno)".
std::string errno_message(const std::string& what, int err);

}  // namespace pscore
