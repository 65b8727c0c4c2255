#include <cstring>

#include "collectives/algorithms.h"

namespace pscore {
namespace {

bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  auto* x = static_cast<const char*>(a);
  auto* y = static_cast<const char*>(b);
  return na != 0 && nb != 0 && x < y + nb && y < x + na;
}

// Whether `output` shares memory with an input block other than `own` (then it cannot hold the
// partial sums before the last step).
bool output_overlaps_others(const std::vector<const void*>& inputs,
                            const std::vector<size_t>& bytes, int own, const void* output) {
  for (size_t b = 0; b < inputs.size(); ++b)
    if (static_cast<int>(b) != own && overlaps(output, bytes[own], inputs[b], bytes[b]))
      return true;
  return false;
}

}  // namespace

// Protocol. In step s (0..n-2) rank r sends its partial block (r - s - 1) right and folds block
// (r - s - 2) from the left into its own partial as it arrives; after n-1 steps block r is
// complete at rank r. The caller's inputs stay untouched: block r - 1 is only ever sent, straight
// from the input; block r accumulates in `output`; the others accumulate in scratch. With two
// ranks nothing is copied but the own block into the output.
void reduce_scatter_ring(Comm& c, const std::vector<const void*>& inputs,
                         const std::vector<size_t>& counts, void* output, ReduceOp op,
                         char* scratch) {
  const int n = c.size();
  const int r = c.rank();
  const size_t esize = dtype_size(c.ctx.dtype);
  auto mod = [n](int b) { return ((b % n) + n) % n; };
  std::vector<size_t> bytes(n);
  for (int b = 0; b < n; ++b) bytes[b] = counts[b] * esize;
  const bool into_output = !output_overlaps_others(inputs, bytes, r, output);
  std::vector<char*> blocks(n);
  size_t off = 0;
  for (int b = 0; b < n; ++b) {
    if (b == mod(r - 1)) {
      blocks[b] = static_cast<char*>(const_cast<void*>(inputs[b]));  // sent, never received into
      continue;
    }
    if (b == r && into_output) {
      blocks[b] = static_cast<char*>(output);
    } else {
      blocks[b] = scratch + off;
      off += bytes[b];
    }
    if (bytes[b] && blocks[b] != inputs[b]) std::memmove(blocks[b], inputs[b], bytes[b]);
  }
  const int right = (r + 1) % n;
  const int left = (r - 1 + n) % n;
  for (int s = 0; s < n - 1; ++s) {
    int out = mod(r - s - 1);
    int in = mod(r - s - 2);
    Exchange x = c.exchange();
    x.send_to_fold(right, blocks[out], bytes[out]);
    x.recv_reduce(left, blocks[in], bytes[in], op);
    x.run();
  }
  if (bytes[r] && blocks[r] != output) std::memcpy(output, blocks[r], bytes[r]);
}

}  // namespace pscore
