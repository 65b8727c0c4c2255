#include <cstring>

#include "collectives/algorithms.h"

namespace pscore {

// Protocol. The inputs are copied into scratch (the caller's inputs stay untouched). In step s
// (0..n-2) rank r sends its partial block (r - s - 1) right and folds block (r - s - 2) from the
// left into its own partial as it arrives; after n-1 steps block r is complete at rank r.
void reduce_scatter_ring(Comm& c, const std::vector<const char*>& inputs,
                         const std::vector<size_t>& counts, void* output, ReduceOp op,
                         char* scratch) {
  const int n = c.size();
  const int r = c.rank();
  const size_t esize = dtype_size(c.ctx.dtype);
  std::vector<char*> blocks(n);
  size_t off = 0;
  for (int b = 0; b < n; ++b) {
    blocks[b] = scratch + off;
    if (counts[b]) std::memcpy(blocks[b], inputs[b], counts[b] * esize);  // empty: maybe no buffer
    off += counts[b] * esize;
  }
  const int right = (r + 1) % n;
  const int left = (r - 1 + n) % n;
  auto mod = [n](int b) { return ((b % n) + n) % n; };
  for (int s = 0; s < n - 1; ++s) {
    int out = mod(r - s - 1);
    int in = mod(r - s - 2);
    Exchange x = c.exchange();
    x.send(right, blocks[out], counts[out] * esize);
    x.recv_reduce(left, blocks[in], counts[in] * esize, op);
    x.run();
  }
  if (counts[r]) std::memcpy(output, blocks[r], counts[r] * esize);
}

}  // namespace pscore
