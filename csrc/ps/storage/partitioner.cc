#include "ps/storage/partitioner.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace pscore::ps {

std::vector<DensePart> plan_dense_parts(int64_t numel, int64_t elem_bytes,
                                        std::vector<int64_t>& shard_bytes,
                                        const PartitionOptions& opts) {
  const int num_shards = static_cast<int>(shard_bytes.size());
  if (num_shards <= 0) throw std::invalid_argument("plan_dense_parts: no shards");
  if (numel < 0) throw std::invalid_argument("plan_dense_parts: negative element count");
  const int64_t bytes = numel * elem_bytes;
  const int64_t min_part = std::max<int64_t>(1, opts.min_part_bytes);
  int64_t k64 = std::max<int64_t>(1, bytes / min_part);
  int k = static_cast<int>(std::min<int64_t>(k64, num_shards));
  k = static_cast<int>(std::min<int64_t>(k, std::max<int64_t>(1, numel)));

  // The k least loaded shards (stable: ties keep the lower index), then in index order so the
  // parts' offsets grow with the shard index.
  std::vector<int> order(num_shards);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return shard_bytes[a] < shard_bytes[b]; });
  order.resize(k);
  std::sort(order.begin(), order.end());

  std::vector<DensePart> parts;
  int64_t base = numel / k, extra = numel % k, offset = 0;
  for (int i = 0; i < k; ++i) {
    DensePart p;
    p.shard = order[i];
    p.offset = offset;
    p.numel = base + (i < extra ? 1 : 0);
    offset += p.numel;
    shard_bytes[p.shard] += p.numel * elem_bytes;
    parts.push_back(p);
  }
  return parts;
}

}  // namespace pscore::ps
