// Runs fn(rank) for ranks 0..n-1 on threads of their own and rethrows the first failure after
// all have joined: n ranks of one collective test in one process.
#pragma once

#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace pscore {

inline void in_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(n);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace pscore
