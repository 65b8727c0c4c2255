// Whether a job's ranks fit on this machine's cores: then a blocked rank may spin and a sender
// may wait for a receiver that runs beside it; otherwise they take turns on the cores.
#pragma once

#include <thread>

namespace pscore {

inline bool ranks_fit_cores(int ranks) {
  return ranks <= static_cast<int>(std::thread::hardware_concurrency());
}

// 8 ranks or more that take turns on the cores: there the ring algorithms' many step ends and
// the total copying cost most.
inline bool many_ranks_take_turns(int ranks) { return ranks >= 8 && !ranks_fit_cores(ranks); }

// How a job's ranks share the cores, for choices that depend on more than whether they fit.
struct Crowding {
  bool fit = true;               // ranks_fit_cores
  bool two_per_core = false;     // at least two ranks to each core
  bool many_take_turns = false;  // many_ranks_take_turns
};

inline Crowding crowding(int ranks) {
  return {ranks_fit_cores(ranks),
          ranks >= 2 * static_cast<int>(std::thread::hardware_concurrency()),
          many_ranks_take_turns(ranks)};
}

}  // namespace pscore
