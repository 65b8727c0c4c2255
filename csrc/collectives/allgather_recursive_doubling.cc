#include "collectives/algorithms.h"

namespace pscore {

// Protocol. For each bit `mask`, lowest first, virtual rank v holds the `mask` blocks of its
// aligned range and swaps them with v ^ mask, which holds the neighbouring range: log2(p2)
// exchanges, each rank sending (p2-1)/p2 of the buffer.
void allgather_recursive_doubling(Comm& c, void* buf, size_t count, const VirtualRanks& ranks) {
  const size_t esize = dtype_size(c.ctx.dtype);
  char* base = static_cast<char*>(buf);
  const int v = ranks.vrank;
  for (int mask = 1; mask < ranks.p2; mask *= 2) {
    const int mine = v & ~(mask - 1);
    const Span out = span_of(count, esize, ranks.p2, mine, mask);
    const Span in = span_of(count, esize, ranks.p2, mine ^ mask, mask);
    Exchange x = c.exchange();
    x.send(ranks.real(v ^ mask), base + out.offset, out.nbytes);
    x.recv(ranks.real(v ^ mask), base + in.offset, in.nbytes);
    x.run();
  }
}

}  // namespace pscore
