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

}  // namespace pscore
