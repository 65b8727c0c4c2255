// How ProcessGroup picks an algorithm for each collective, by size, transport and world.
#include <cstdint>

#include "collectives/process_group.h"

namespace pscore {
namespace {
// Auto takes halving-doubling over costly steps up to this size. 4 ranks over TCP, time against
// Open MPI's in the same runs: 256 KB 0.46-0.60 (the ring 0.62-0.68), 1 MB 0.64-0.77 (the ring
// 0.78-1.06); from 1.5 MB on as often slower as faster (2 MB 0.90-1.37 against 0.71-0.97). A
// pair's exchange then outgrows the socket buffers and progresses only while both ranks have a
// core, where any two ranks on the cores have a link of the ring between them.
constexpr size_t kAutoHalvingDoublingMaxBytes = 1 << 20;
// 8 ranks on 2 cores, shared memory, two groups alternating, halving-doubling / the ring: 128 KB
// 0.66-0.72, 256 KB 0.66-0.72, 512 KB 0.80-0.99, 1 MB 0.89-1.01; from 2 MB as often slower as
// faster (2 MB 0.92 and 1.09, 8 MB 1.11, 16 MB 0.83-0.93; TCP 8-16 MB 1.01-1.03). 4 ranks lost
// (128 KB-1 MB 0.93-1.20).
// While ranks take turns on the cores, the end of a step can cost a rank a wait for its partner's
// turn, and auto doubles all_gathers from this size in all (log2(n) steps against n-1). Loops of
// all_gathers, two groups alternating in one process, doubling time / the ring's: 4 ranks on 2
// cores, shared memory, 1 MB 0.94-1.23, 2 MB 0.93-0.98, 4 MB 0.79-0.95, 16 MB 0.79-1.00; 8 ranks
// 1 MB 0.83-0.84, 4 MB 0.74-0.81, 16 MB 0.88-1.05; TCP, 4 ranks, 4 MB 0.91-1.00, 16 MB 0.81-1.08.
// reduce_scatter's halving first copies its inputs, and lost at 16 MB (1.10-1.60). From 8 ranks
// the ring's 7 step ends cost more already from 256 KB: 8 ranks, shared memory, 256 KB 0.70-0.72,
// 512 KB 0.79-0.80, 1 MB 0.95-1.02, 2 MB 0.77-0.87; TCP 2 MB 0.77-0.88.
constexpr size_t kTakingTurnsAllgatherBytes = 4 << 20;
constexpr size_t kTakingTurnsAllgatherBytesFrom8Ranks = 256 << 10;
}  // namespace

AllreduceAlgorithm ProcessGroup::allreduce_algorithm(size_t count, DType dtype) const {
  const size_t nbytes = count * dtype_size(dtype);
  const AllreduceAlgorithm asked = options_.allreduce_algorithm;
  if (count < static_cast<size_t>(size())) return AllreduceAlgorithm::kRecursiveDoubling;
  if (asked != AllreduceAlgorithm::kAuto) return asked;
  if (nbytes <= options_.small_allreduce_bytes) return AllreduceAlgorithm::kRecursiveDoubling;
  // Over costly steps (sockets), fewer steps pay where the pairs' exchanges fit the socket
  // buffers; the folds of other world sizes would move the whole buffer twice more. So do they
  // from 8 ranks taking turns on the cores, up to the same size.
  if ((fewer_steps_pay_ || many_power_of_two_ranks_take_turns()) &&
      nbytes <= kAutoHalvingDoublingMaxBytes)
    return AllreduceAlgorithm::kHalvingDoubling;
  return AllreduceAlgorithm::kRing;
}

// Auto takes the log2(n)-step allgather and reduce_scatter up to these sizes in all (all ranks'
// blocks) on any transport, over costly steps up to kAutoHalvingDoublingMaxBytes, and while ranks
// take turns on the cores from `turns_bytes` (kTakingTurnsAllgatherBytes, less from 8 ranks; never
// for reduce_scatter). 4 ranks on
// shared memory, time against the ring's in the same runs: allgather 4-32 KB 0.75-0.94, 64 KB
// 1.18-1.67; reduce_scatter 4 KB 0.63-0.74, 64 KB 0.73-0.92, 1 MB 1.0-1.29.
constexpr size_t kAutoFewerStepsAllgatherBytes = 32 << 10;
constexpr size_t kAutoFewerStepsReduceScatterBytes = 64 << 10;

template <class Algorithm>
Algorithm ProcessGroup::fewer_steps_or_ring(size_t total_bytes, size_t small_bytes,
                                            size_t turns_bytes, Algorithm asked,
                                            Algorithm fewer) const {
  if (!power_of_two_) return Algorithm::kRing;
  if (asked != Algorithm::kAuto) return asked;
  if (total_bytes <= small_bytes) return fewer;
  if (fewer_steps_pay_ && total_bytes <= kAutoHalvingDoublingMaxBytes) return fewer;
  if (!fits_cores_ && total_bytes >= turns_bytes) return fewer;
  return Algorithm::kRing;
}

AllgatherAlgorithm ProcessGroup::allgather_algorithm(size_t count, DType dtype) const {
  const size_t turns_bytes = many_power_of_two_ranks_take_turns()
                                 ? kTakingTurnsAllgatherBytesFrom8Ranks
                                 : kTakingTurnsAllgatherBytes;
  return fewer_steps_or_ring(count * dtype_size(dtype) * size(), kAutoFewerStepsAllgatherBytes,
                             turns_bytes, options_.allgather_algorithm,
                             AllgatherAlgorithm::kRecursiveDoubling);
}

ReduceScatterAlgorithm ProcessGroup::reduce_scatter_algorithm(size_t count, DType dtype) const {
  return fewer_steps_or_ring(count * dtype_size(dtype) * size(), kAutoFewerStepsReduceScatterBytes,
                             SIZE_MAX, options_.reduce_scatter_algorithm,
                             ReduceScatterAlgorithm::kRecursiveHalving);
}

// While ranks take turns on the cores, a broadcast whose payloads travel by address lets every
// receiver copy out of the root's buffer at once: the n-1 copies then share the cores, where
// the tree's second level waits for its first. Loops of broadcasts on 2 cores, two groups
// alternating, time from the root / the tree's: 4 ranks 4 MB 0.81-0.82, 16 MB 0.82-0.85, 64 MB
// 0.88. From 8 ranks that holds from the fanned-out payloads' 256 KB, against a tree through the
// rings: 256 KB 0.73-0.86, 512 KB 0.64-0.66, 1 MB 0.64-0.65, 2 MB 0.50-0.85 (4 ranks: 1.05-1.9).
BroadcastAlgorithm ProcessGroup::broadcast_algorithm(size_t nbytes) const {
  if (size() > 3 && nbytes >= large_broadcast_bytes_) return BroadcastAlgorithm::kScatterAllgather;
  const Payload from_root = size() >= 8 ? Payload::kMoved : Payload::kMovedOneWay;
  if (!fits_cores_ && transport_->sends_by_address(nbytes, from_root))
    return BroadcastAlgorithm::kFromRoot;
  return BroadcastAlgorithm::kBinomial;
}

}  // namespace pscore
