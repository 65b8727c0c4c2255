#include <cstring>

#include "collectives/algorithms.h"

namespace pscore {

// Protocol (binomial tree, root renumbered to 0). For mask = 1, 2, 4, ...: a rank with bit
// `mask` set sends its partial result to v - mask and stops; otherwise it folds in the partial
// result of v + mask (if that rank exists). The root ends with everything reduced.
void reduce_binomial(Comm& c, void* buf, size_t count, ReduceOp op, int root, void* scratch) {
  const int n = c.size();
  const int v = (c.rank() - root + n) % n;
  const size_t nbytes = count * dtype_size(c.ctx.dtype);
  auto real = [n, root](int vr) { return (vr + root) % n; };
  // Non-roots that fold in others' results accumulate in scratch so their input is left as it
  // was; a leaf (v odd, or the last rank) sends its input as it is.
  void* acc = buf;
  const bool folds = v % 2 == 0 && v + 1 < n;
  if (v != 0 && folds) {
    if (nbytes) std::memcpy(scratch, buf, nbytes);  // an empty tensor may have no buffers at all
    acc = scratch;
  }
  for (int mask = 1; mask < n; mask <<= 1) {
    Exchange x = c.exchange();
    if (v & mask) {
      x.send_to_fold(real(v - mask), acc, nbytes);
      x.run();
      return;
    }
    if (v + mask < n) {
      x.recv_reduce(real(v + mask), acc, nbytes, op);
      x.run();
    }
  }
}

}  // namespace pscore
