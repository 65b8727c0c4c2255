#include <cstring>

#include "collectives/algorithms.h"

namespace pscore {

// Protocol (binomial tree). Ranks are renumbered so the root is 0 (v = r - root mod n). A rank
// whose lowest set bit is `mask` receives from v - mask, then sends to v + m for every smaller
// power of two m, largest first, so the tree is ceil(log2 n) deep.
void broadcast_binomial(Comm& c, void* buf, size_t nbytes, int root) {
  const int n = c.size();
  const int v = (c.rank() - root + n) % n;
  auto real = [n, root](int vr) { return (vr + root) % n; };
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      Exchange x = c.exchange();
      x.recv(real(v - mask), buf, nbytes);
      x.run();
      break;
    }
    mask <<= 1;
  }
  mask >>= 1;
  Exchange x = c.exchange();
  for (; mask > 0; mask >>= 1)
    if (v + mask < n) x.send(real(v + mask), buf, nbytes);
  x.run();
}

// Protocol. The root sends block b of the buffer to rank b (all at once); then a ring allgather
// gives every rank every block. Each rank moves ~2x the buffer instead of log2(n) x.
void broadcast_scatter_allgather(Comm& c, void* buf, size_t count, int root) {
  const int n = c.size();
  const int r = c.rank();
  const size_t esize = dtype_size(c.ctx.dtype);
  char* base = static_cast<char*>(buf);
  {
    Exchange x = c.exchange();
    if (r == root) {
      for (int p = 0; p < n; ++p) {
        if (p == root) continue;
        Block b = block_of(count, n, p);
        x.send(p, base + b.offset * esize, b.length * esize);
      }
    } else {
      Block b = block_of(count, n, r);
      x.recv(root, base + b.offset * esize, b.length * esize);
    }
    x.run();
  }
  std::vector<void*> outputs(n);
  std::vector<size_t> bytes(n);
  for (int p = 0; p < n; ++p) {
    Block b = block_of(count, n, p);
    outputs[p] = base + b.offset * esize;
    bytes[p] = b.length * esize;
  }
  allgather_ring(c, nullptr, outputs, bytes);
}

}  // namespace pscore
