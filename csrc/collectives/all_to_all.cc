#include "collectives/algorithms.h"

namespace pscore {

// Protocol: each rank posts a send of block p to every rank p and a receive from every rank p,
// and the exchange progresses all of them together; the own block is copied locally meanwhile.
void all_to_all_pairwise(Comm& c, const std::vector<const void*>& inputs,
                         const std::vector<size_t>& send_bytes, const std::vector<void*>& outputs,
                         const std::vector<size_t>& recv_bytes) {
  const int r = c.rank();
  Exchange x = c.exchange();
  for (int p = 0; p < c.size(); ++p) {
    if (p == r) continue;
    x.send(p, inputs[p], send_bytes[p]);
    x.recv(p, outputs[p], recv_bytes[p]);
  }
  x.copy(outputs[r], inputs[r], recv_bytes[r]);
  x.run();
}

}  // namespace pscore
