#include "collectives/algorithms.h"

namespace pscore {

// Protocol (dissemination): in round k rank r signals r + 2^k and waits for r - 2^k (mod n).
// After ceil(log2 n) rounds every rank has transitively heard from every other.
void barrier_dissemination(Comm& c) {
  const int n = c.size();
  const int r = c.rank();
  for (int dist = 1; dist < n; dist <<= 1) {
    Exchange x = c.exchange();
    x.send((r + dist) % n, nullptr, 0);
    x.recv((r - dist + n) % n, nullptr, 0);
    x.run();
  }
}

}  // namespace pscore
