#include "collectives/algorithms.h"

namespace pscore {

Block block_of(size_t count, int n, int b) {
  size_t base = count / n;
  size_t extra = count % n;
  size_t ub = static_cast<size_t>(b);
  size_t offset = ub * base + (ub < extra ? ub : extra);
  return Block{offset, base + (ub < extra ? 1 : 0)};
}

Span span_of(size_t count, size_t esize, int n, int first, int blocks) {
  const Block a = block_of(count, n, first);
  const Block z = block_of(count, n, first + blocks - 1);
  return Span{a.offset * esize, (z.offset + z.length - a.offset) * esize};
}

}  // namespace pscore
