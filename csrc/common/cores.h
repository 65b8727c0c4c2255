// Whether a job's ranks fit on this machine's cores: then a blocked rank may spin and a sender
// may wait for a receiver that runs beside it; otherwise they take turns on the cores.
#pragma once

#include <thread>

namespace pscore {

inline bool ranks_fit_cores(int ranks) {
  return ranks <= static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace pscore
