#include "collectives/algorithms.h"

namespace pscore {

// Protocol: every non-root sends its block to the root, which receives all of them at once.
void gather_direct(Comm& c, const void* input, size_t nbytes, const std::vector<void*>& outputs,
                   int root) {
  Exchange x = c.exchange();
  if (c.rank() != root) {
    x.send_fan_in(root, input, nbytes);
  } else {
    for (int p = 0; p < c.size(); ++p) {
      if (p == root) continue;
      x.recv(p, outputs[p], nbytes);
    }
    x.copy(outputs[root], input, nbytes);
  }
  x.run();
}

// Protocol: the root sends block p to rank p, all at once; the others receive theirs.
void scatter_direct(Comm& c, const std::vector<const void*>& inputs, void* output, size_t nbytes,
                    int root) {
  Exchange x = c.exchange();
  if (c.rank() != root) {
    x.recv(root, output, nbytes);
  } else {
    for (int p = 0; p < c.size(); ++p) {
      if (p == root) continue;
      x.send(p, inputs[p], nbytes);
    }
    x.copy(output, inputs[root], nbytes);
  }
  x.run();
}

}  // namespace pscore
