#include "transport/shm/shared_move.h"

#include <algorithm>

namespace pscore {
namespace {
constexpr size_t kWholeBelowBytes = 128 << 10;
constexpr size_t kMaxMoveChunks = 8;
constexpr size_t kMoveBytesPerChunk = 512 << 10;
constexpr size_t kPageBytes = 4096;
}  // namespace

size_t move_chunk_bytes(size_t n) {
  const size_t fewest = n < kWholeBelowBytes ? 1 : 2;
  const size_t chunks = std::clamp(n / kMoveBytesPerChunk, fewest, kMaxMoveChunks);
  const size_t even = (n + chunks - 1) / chunks;
  return std::max(kPageBytes, (even + kPageBytes - 1) / kPageBytes * kPageBytes);
}

std::optional<MoveChunk> claim_move_chunk(std::atomic<uint64_t>& claims, uint64_t message, size_t n,
                                          Claimer who) {
  const size_t chunk = move_chunk_bytes(n);
  const uint64_t chunks = (n + chunk - 1) / chunk;
  const uint64_t first = move_claim(message, 0);
  uint64_t word = claims.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t taken = word - first;  // wraps to a huge count for another message
    if (taken >= chunks) return std::nullopt;
    const bool alone = who.receiver && (!who.helper || (who.claims > 0 && taken == who.claims));
    const uint64_t take = alone ? chunks - taken : 1;
    if (claims.compare_exchange_weak(word, word + take, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      const size_t offset = taken * chunk;
      return MoveChunk{offset, std::min(take * chunk, n - offset)};
    }
  }
}

}  // namespace pscore
