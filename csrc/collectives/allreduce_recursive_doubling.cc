#include <cstring>

#include "collectives/algorithms.h"
#include "common/reduce.h"

namespace pscore {

// Protocol. Let p2 be the largest power of two <= n and rem = n - p2. First the extra ranks fold
// in: among ranks < 2*rem, each even rank sends its buffer to the odd rank above it and sits out.
// The p2 remaining ranks ("virtual ranks") then exchange whole buffers with the partner whose
// virtual rank differs in bit k, for k = 0..log2(p2)-1, reducing each time. Since a op b == b op a
// bit for bit, every rank ends with the same bytes. Finally each odd rank < 2*rem sends the
// result back to its even neighbour.
void allreduce_recursive_doubling(Comm& c, void* buf, size_t count, ReduceOp op, void* scratch) {
  const int n = c.size();
  const int r = c.rank();
  const size_t nbytes = count * dtype_size(c.ctx.dtype);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;

  int vrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      Exchange x = c.exchange();
      x.send(r + 1, buf, nbytes);
      x.run();
      Exchange back = c.exchange();
      back.recv(r + 1, buf, nbytes);
      back.run();
      return;
    }
    Exchange x = c.exchange();
    x.recv_reduce(r - 1, buf, nbytes, op);
    x.run();
    vrank = r / 2;
  } else {
    vrank = r - rem;
  }

  auto real_rank = [rem](int v) { return v < rem ? v * 2 + 1 : v + rem; };
  for (int mask = 1; mask < p2; mask <<= 1) {
    int partner = real_rank(vrank ^ mask);
    Exchange x = c.exchange();
    x.send(partner, buf, nbytes);
    x.recv(partner, scratch, nbytes);
    x.run();
    reduce_into(buf, scratch, count, c.ctx.dtype, op);
  }

  if (r < 2 * rem) {
    Exchange x = c.exchange();
    x.send(r - 1, buf, nbytes);
    x.run();
  }
}

}  // namespace pscore
