#include "collectives/algorithms.h"

namespace pscore {

// Protocol. In step s (0..n-2) rank r forwards block (r - s) to its right neighbour and receives
// block (r - s - 1) from its left one directly into place; blocks may differ in size. Step 0
// sends the own block from `input`, which is copied into place meanwhile.
void allgather_ring(Comm& c, const void* input, const std::vector<void*>& outputs,
                    const std::vector<size_t>& bytes) {
  const int n = c.size();
  const int r = c.rank();
  const int right = (r + 1) % n;
  const int left = (r - 1 + n) % n;
  auto mod = [n](int b) { return ((b % n) + n) % n; };
  for (int s = 0; s < n - 1; ++s) {
    int out = mod(r - s);
    int in = mod(r - s - 1);
    Exchange x = c.exchange();
    if (s == 0 && input) {
      x.send(right, input, bytes[out]);
      x.copy(outputs[out], input, bytes[out]);
    } else {
      x.send(right, outputs[out], bytes[out]);
    }
    x.recv(left, outputs[in], bytes[in]);
    x.run();
  }
}

}  // namespace pscore
