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

// Protocol. The root sends the whole buffer to every other rank; each receives it from the root.
void broadcast_from_root(Comm& c, void* buf, size_t nbytes, int root) {
  Exchange x = c.exchange();
  if (c.rank() == root) {
    for (int r = 0; r < c.size(); ++r)
      if (r != root) x.send(r, buf, nbytes);
  } else {
    x.recv(root, buf, nbytes);
  }
  x.run();
}

// Protocol. Ranks are renumbered so the root is 0 (v = r - root mod n). The root sends block v
// of the buffer to virtual rank v (all at once); then an allgather gives every rank every block.
// Each rank moves ~2x the buffer instead of log2(n) x.
void broadcast_scatter_allgather(Comm& c, void* buf, size_t count, int root,
                                 bool recursive_doubling) {
  const int n = c.size();
  const VirtualRanks ranks{n, (c.rank() - root + n) % n, root, n};
  const size_t esize = dtype_size(c.ctx.dtype);
  char* base = static_cast<char*>(buf);
  {
    Exchange x = c.exchange();
    if (ranks.vrank == 0) {
      for (int v = 1; v < n; ++v) {
        const Span b = span_of(count, esize, n, v, 1);
        x.send(ranks.real(v), base + b.offset, b.nbytes);
      }
    } else {
      const Span b = span_of(count, esize, n, ranks.vrank, 1);
      x.recv(root, base + b.offset, b.nbytes);
    }
    x.run();
  }
  if (recursive_doubling) {
    allgather_recursive_doubling(c, buf, count, ranks);
    return;
  }
  std::vector<void*> outputs(n);
  std::vector<size_t> bytes(n);
  for (int r = 0; r < n; ++r) {
    const Span b = span_of(count, esize, n, (r - root + n) % n, 1);
    outputs[r] = base + b.offset;
    bytes[r] = b.nbytes;
  }
  allgather_ring(c, nullptr, outputs, bytes);
}

}  // namespace pscore
