#include <cstring>

#include "collectives/algorithms.h"

namespace pscore {

// Protocol. The inputs are copied into scratch in block order (the caller's stay untouched). For
// each bit `mask`, highest first, rank r keeps the half of its range of blocks on its side of the
// bit (the upper one when r has it), sends the other half to r ^ mask and folds the partner's
// copy of the kept half in as it arrives; after log2(n) exchanges r holds block r, reduced. Each
// block is reduced on one rank only.
void reduce_scatter_recursive_halving(Comm& c, const std::vector<const void*>& inputs, size_t count,
                                      void* output, ReduceOp op, char* scratch) {
  const int r = c.rank();
  const size_t nbytes = count * dtype_size(c.ctx.dtype);
  for (int b = 0; b < c.size(); ++b)
    if (nbytes) std::memcpy(scratch + b * nbytes, inputs[b], nbytes);
  int first = 0;  // the range of blocks r holds: [first, first + blocks)
  int blocks = c.size();
  for (int mask = c.size() / 2; mask >= 1; mask /= 2) {
    const int half = blocks / 2;
    const bool upper = (r & mask) != 0;
    const int keep = upper ? first + half : first;
    const int give = upper ? first : first + half;
    Exchange x = c.exchange();
    x.send_to_fold(r ^ mask, scratch + give * nbytes, half * nbytes);
    x.recv_reduce(r ^ mask, scratch + keep * nbytes, half * nbytes, op);
    x.run();
    first = keep;
    blocks = half;
  }
  if (nbytes) std::memcpy(output, scratch + r * nbytes, nbytes);
}

}  // namespace pscore
