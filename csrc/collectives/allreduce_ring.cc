#include "collectives/algorithms.h"

namespace pscore {

// Protocol. The buffer is cut into n blocks. Reduce-scatter: in step s (0..n-2) rank r sends
// block (r - s) to its right neighbour while receiving block (r - s - 1) from its left one and
// folding it in as the bytes arrive (straight from the socket staging area or the shared ring,
// chunk by chunk, so receiving and reducing overlap). Rank r then holds the reduced block r + 1.
// Allgather: in step s rank r sends block (r + 1 - s) right and receives block (r - s) from the
// left directly into place. Each block is reduced along one chain, so all ranks agree bitwise.
void allreduce_ring(Comm& c, void* buf, size_t count, ReduceOp op) {
  const int n = c.size();
  const int r = c.rank();
  const size_t esize = dtype_size(c.ctx.dtype);
  char* base = static_cast<char*>(buf);
  const int right = (r + 1) % n;
  const int left = (r - 1 + n) % n;
  auto mod = [n](int b) { return ((b % n) + n) % n; };

  for (int s = 0; s < n - 1; ++s) {
    Block out = block_of(count, n, mod(r - s));
    Block in = block_of(count, n, mod(r - s - 1));
    Exchange x = c.exchange();
    x.send_to_fold(right, base + out.offset * esize, out.length * esize);
    x.recv_reduce(left, base + in.offset * esize, in.length * esize, op);
    x.run();
  }
  for (int s = 0; s < n - 1; ++s) {
    Block out = block_of(count, n, mod(r + 1 - s));
    Block in = block_of(count, n, mod(r - s));
    Exchange x = c.exchange();
    x.send(right, base + out.offset * esize, out.length * esize);
    x.recv(left, base + in.offset * esize, in.length * esize);
    x.run();
  }
}

}  // namespace pscore
