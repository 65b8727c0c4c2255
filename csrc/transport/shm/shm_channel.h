// A Channel over two shared-memory rings: outbound lives in the peer's segment, inbound in ours.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/cores.h"
#include "transport/channel.h"
#include "transport/shm/ring_gauge.h"
#include "transport/shm/shm_layout.h"

namespace pscore {

struct RingView {
  RingHeader* header = nullptr;
  char* data = nullptr;
  uint64_t capacity = 0;
};

// The smallest payloads that travel as addresses (0: none): those the receiver copies as they
// are, and those it folds into its buffer. kDefault, resolved per ring by `resolved`:
// - reduced: payloads larger than the ring. A reduction reads an address through a cache-sized
//   scratch, and a payload that fits the ring lets its sender write it all and go on to its own
//   receives while the peer reduces from the ring in place.
// - reduced one way (resolved from `reduced`): where the ranks fit on the cores, none by size:
//   the sender has nothing else to do, and through the ring its copy runs beside the receiver's
//   fold. 2 ranks, loops of reduces, through the ring / by address: 8 MB 0.60-0.63, 16 MB 0.65,
//   64 MB 0.66. But from 32 KB while copies into the ring are slow, as moved payloads: in such
//   spells a reduce of 256 KB took 64-95 us a call through the ring against 36-37 by address,
//   and of 16 MB 8.2-9.5 ms against 2.6-3.6. Else as `reduced`.
// - reduced in an all_reduce (resolved from `reduced`): the same, but from 256 KB where 8 ranks
//   or more take turns on the cores. 8 ranks on 2 cores, loops of all_reduces, two groups
//   alternating, time / through the ring: 512 KB-16 MB 0.66-0.91. reduce and reduce_scatter lost
//   (0.93-1.32), so they keep the ring.
// - moved: payloads that fill the ring, when the ranks fit on the cores: below that the ring's
//   two copies run at once on two cores, and its sender need not wait for the reader; but from
//   32 KB while copies into the ring are slow (ring_gauge.h). While ranks take turns on the cores,
//   the single copy's halved work pays from 256 KB: smaller payloads lost, as a sender then waits
//   for its receiver's turn to read where the ring lets it go on.
// - moved in an all_reduce (resolved from `moved`): the same, but from 512 KB where fewer than 8
//   ranks take turns. There the reductions keep the ring, and the all_reduce's second half, if it
//   goes by address, first waits out the ranks' drift: 4 ranks, 256 KB blocks 1.14-1.54 slower,
//   512 KB and more 0.82-0.94 faster than through the ring.
// - moved one way (resolved from `moved`): a sender that only sends, to fewer than kFanOutPeers
//   peers (a broadcast tree's), would wait for each receiver to get a core and read; through the
//   ring it goes on. So payloads that fit the ring take it, also while ranks take turns on the
//   cores.
// - fanned in (resolved from `moved`): as one way where the ranks fit on the cores or 8 and more
//   take turns; else through the ring, but from 8 MB where two ranks or more share each core.
//   Through the ring the senders' copies run beside the receiver's; by address the senders help
//   (shared_move.h). A gather on 2 cores, by address / through the ring:
//   - 3 ranks: 8 MB blocks 1.82-1.87, 16 MB 1.56-1.64;
//   - 4 ranks: 1 MB blocks 1.13-1.19, 5 MB 1.40-1.64, 6 MB 1.15-1.19, 8 MB 0.69-0.83, 16 MB
//     0.61-0.69; with a 1 MB ring the ring still won at 4 MB blocks (1.74-1.79), so the size does
//     not follow the ring;
//   - 6 ranks: 8 MB blocks 0.84-1.07, 16 MB 0.79-0.86;
//   - 8 ranks: 1 MB blocks 0.86-0.97, 4 MB 0.94-1.01, 8 MB 1.19-1.20 the other way.
struct SingleCopyBytes {
  static constexpr uint64_t kDefault = UINT64_MAX;
  static constexpr uint64_t kGaugedBytes = 32 << 10;  // the smallest that follow the RingGauge
  static constexpr uint64_t kTakingTurnsMovedBytes = 256 << 10;
  static constexpr uint64_t kFewTakingTurnsAllReduceMovedBytes = 512 << 10;
  static constexpr uint64_t kManyRanksAllReduceReducedBytes = 256 << 10;
  static constexpr uint64_t kTwoPerCoreFanInBytes = 8 << 20;
  uint64_t moved = kDefault;
  uint64_t reduced = kDefault;
  uint64_t moved_in_all_reduce = kDefault;
  uint64_t reduced_in_all_reduce = kDefault;
  uint64_t reduced_one_way = kDefault;
  uint64_t one_way = kDefault;
  uint64_t fan_in = kDefault;
  bool moved_follows_ring = false;    // resolved: moved payloads consult the RingGauge
  bool reduced_follows_ring = false;  // resolved: reduced one-way payloads consult it too
  static_assert(kGaugedBytes >= RingGauge::kTimedBytes, "probes must be measured");
  bool any() const { return moved != 0 || reduced != 0; }
  static SingleCopyBytes off() { return {0, 0, 0, 0, 0, 0, 0}; }
  // The smallest payload of this kind that travels as an address by its size alone (0: none).
  uint64_t threshold(Payload payload) const {
    switch (payload) {
      case Payload::kReduced:
        return reduced;
      case Payload::kReducedInAllReduce:
        return reduced_in_all_reduce;
      case Payload::kReducedOneWay:
        return reduced_one_way;
      case Payload::kMovedInAllReduce:
        return moved_in_all_reduce;
      case Payload::kMovedOneWay:
        return one_way;
      case Payload::kMovedFanIn:
        return fan_in;
      case Payload::kMoved:
        break;
    }
    return moved;
  }
  bool by_size(size_t nbytes, Payload payload) const {
    const uint64_t t = threshold(payload);
    return t != 0 && nbytes >= t;
  }
  // Whether a payload not sent by address for its size asks the RingGauge.
  bool gauged(size_t nbytes, Payload payload) const {
    if (nbytes < kGaugedBytes || by_size(nbytes, payload)) return false;
    if (payload == Payload::kReducedOneWay) return reduced_follows_ring;
    const bool reduced = payload == Payload::kReduced || payload == Payload::kReducedInAllReduce;
    return !reduced && moved_follows_ring && threshold(payload) != 0;
  }
  SingleCopyBytes resolved(uint64_t ring_capacity, Crowding cores) const {
    SingleCopyBytes r = *this;
    if (moved == kDefault) {
      r.moved =
          cores.fit ? ring_capacity : std::min<uint64_t>(kTakingTurnsMovedBytes, ring_capacity);
      r.moved_follows_ring = cores.fit;
    }
    const bool follows_moved = moved != kDefault || cores.fit || cores.many_take_turns;
    r.moved_in_all_reduce =
        follows_moved ? r.moved
                      : std::min<uint64_t>(kFewTakingTurnsAllReduceMovedBytes, ring_capacity);
    r.one_way = moved == kDefault ? ring_capacity : moved;
    if (follows_moved)
      r.fan_in = r.one_way;
    else
      r.fan_in = cores.two_per_core ? kTwoPerCoreFanInBytes : 0;
    if (reduced == kDefault) {
      r.reduced = ring_capacity + 1;
      r.reduced_follows_ring = cores.fit;
    }
    r.reduced_one_way = r.reduced_follows_ring ? kDefault : r.reduced;
    r.reduced_in_all_reduce = reduced == kDefault && cores.many_take_turns
                                  ? std::min(kManyRanksAllReduceReducedBytes, r.reduced)
                                  : r.reduced;
    return r;
  }
};

class ShmChannel : public Channel {
 public:
  // `peer_header` is rung after each write and each read (the peer is both our consumer and
  // our producer); writes fail once it has aborted the group. `peer_name` names it in errors.
  // Payloads of at least `single_copy`'s sizes travel as addresses when the peer has probed that
  // it may read our memory. `helps_moves`: this rank may write the peer's memory, so it copies
  // parts of its own payloads into the peer's buffer while the peer reads the rest.
  ShmChannel(RingView out, RingView in, ShmHeader* peer_header, std::string peer_name,
             SingleCopyBytes single_copy, bool helps_moves);
  size_t write_some(const void* a, size_t na, const void* b, size_t nb) override;
  size_t read_some(size_t max, size_t granule, const Sink& sink) override;
  size_t peek(void* dst, size_t n) override;
  bool single_copy(size_t nbytes, Payload payload) override;
  uint64_t publish() override { return ++published_; }
  uint64_t acknowledged() const override;
  size_t read_peer(uint64_t address, void* dst, size_t n) override;
  void acknowledge() override;
  void begin_move(uint64_t address, void* dst, size_t nbytes) override;
  size_t move_some() override;
  bool help_move(uint64_t ticket, const void* data, size_t nbytes) override;
  bool signals() const override { return true; }
  // How fast large writes into the outbound ring ran lately (tests feed it samples).
  RingGauge& ring_gauge() { return ring_gauge_; }
  void signal(uint64_t value) override;
  bool signalled(uint64_t value) const override;

 private:
  // The payload this rank is moving in (shared_move.h).
  struct Move {
    uint64_t message = 0;
    uint64_t from = 0;
    char* to = nullptr;
    size_t nbytes = 0;
    size_t copied = 0;  // by this rank; the sender's part is the ring header's `pushed`
    size_t claims = 0;  // this rank's claims (one may take several chunks)
  };
  size_t pass_on(size_t max, size_t granule, const Sink& sink) const;
  void ring_peer();
  // Throws NetworkError unless this rank's probe at connect found it may read the peer's memory.
  void require_probed() const;
  RingView out_;
  RingView in_;
  ShmHeader* peer_;
  std::string peer_name_;
  SingleCopyBytes single_copy_;
  bool helps_moves_;
  uint64_t published_ = 0;
  // The outbound ring's tail as last read: the reader only moves it on, so the space it implies
  // is never too large, and the reader's cache line is read only when that space runs short.
  uint64_t known_tail_ = 0;
  RingGauge ring_gauge_;  // how fast large writes into the outbound ring run
  Move move_;
};

// Throws NetworkError naming `peer_name` when the rank owning `h` has aborted the group.
void throw_if_aborted(const ShmHeader* h, const std::string& peer_name);

// Bumps a doorbell and wakes its sleepers, if any.
void ring_doorbell(ShmHeader* h);

}  // namespace pscore
