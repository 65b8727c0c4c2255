#include <cstring>

#include "collectives/algorithms.h"
#include "common/reduce.h"

namespace pscore {

// Protocol. After the extra ranks fold in (PowerOfTwoFold), the p2 virtual ranks exchange whole
// buffers with the partner whose virtual rank differs in bit k, for k = 0..log2(p2)-1, reducing
// each time. Since a op b == b op a bit for bit, every rank ends with the same bytes; the folded
// ranks get them back at the end.
void allreduce_recursive_doubling(Comm& c, void* buf, size_t count, ReduceOp op, void* scratch) {
  const size_t nbytes = count * dtype_size(c.ctx.dtype);
  const PowerOfTwoFold fold(c);
  if (!fold.fold_in(c, buf, nbytes, op)) return;
  for (int mask = 1; mask < fold.p2(); mask <<= 1) {
    const int partner = fold.real_rank(fold.vrank() ^ mask);
    Exchange x = c.exchange();
    x.send(partner, buf, nbytes);
    x.recv(partner, scratch, nbytes);
    x.run();
    reduce_into(buf, scratch, count, c.ctx.dtype, op);
  }
  fold.fold_out(c, buf, nbytes);
}

}  // namespace pscore
