#include "collectives/algorithms.h"

namespace pscore {

// Protocol (dissemination): in round k rank r signals r + 2^k and waits for r - 2^k (mod n).
// After ceil(log2 n) rounds every rank has transitively heard from every other. A signal is an
// empty message, or where the transport has them (shared memory) a word the peer polls: no ring
// traffic, header or copy.
void barrier_dissemination(Comm& c) {
  const int n = c.size();
  const int r = c.rank();
  for (int dist = 1; dist < n; dist <<= 1) {
    const int to = (r + dist) % n;
    const int from = (r - dist + n) % n;
    Exchange x = c.exchange();
    if (c.transport.channel(to, c.ctx.lane).signals()) {
      x.signal(to);
      x.await_signal(from);
    } else {
      x.send(to, nullptr, 0);
      x.recv(from, nullptr, 0);
    }
    x.run();
  }
}

}  // namespace pscore
