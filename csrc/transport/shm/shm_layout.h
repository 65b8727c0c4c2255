// Layout of a rank's shared-memory segment: a header (identity, doorbell, abort flag) followed by
// one inbound single-producer single-consumer byte ring per (peer, lane).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/transport.h"

namespace pscore {

constexpr uint64_t kShmMagic = 0x50534d454d303034ull;  // "PSMEM004"
constexpr size_t kShmReasonBytes = 480;

struct alignas(64) ShmHeader {
  uint64_t magic;
  uint64_t token;  // random, proves a peer mapped the segment it was told about
  int32_t pid;
  int32_t rank;
  int32_t world;
  int32_t pad;
  uint64_t ring_bytes[kNumLanes];
  uint64_t self_address;  // where the owner maps this header, for peers' cross-memory probes
  alignas(64) std::atomic<uint32_t> doorbell;  // bumped by peers that wrote or freed space while
                                               // a thread of this rank sleeps
  alignas(64) std::atomic<uint32_t> sleepers;  // threads of this rank blocked on the doorbell
  alignas(64) std::atomic<uint32_t> aborted;
  char reason[kShmReasonBytes];
};

struct alignas(64) RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes ever written (producer)
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever consumed (consumer)
  // Single-copy transfers (cross_memory.h): the consumer sets `single_copy_ok` once it has probed
  // that it may read the producer's memory, and bumps `acks` after reading each payload that
  // the producer published as an address.
  alignas(64) std::atomic<uint64_t> acks;
  std::atomic<uint32_t> single_copy_ok;
  // Shared moves: both ranks copy a payload the receiver keeps as it is (shared_move.h). The
  // receiver posts its destination, then `claims` = move_claim(message number, next chunk); the
  // sender posts in `helper` the number of the message it is free to help with, and adds the
  // bytes it wrote to `pushed`.
  alignas(64) std::atomic<uint64_t> claims;
  std::atomic<uint64_t> move_destination;
  alignas(64) std::atomic<uint64_t> pushed;
  std::atomic<uint64_t> helper;
  // The producer's signal (Channel::signal): the sequence number of its last signalled operation.
  alignas(64) std::atomic<uint64_t> signal;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory rings need lock-free atomics");
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "the doorbell needs a lock-free futex word");

inline size_t ring_stride(uint64_t ring_bytes) { return sizeof(RingHeader) + ring_bytes; }

// Offset of the inbound ring from `peer` on `lane` inside a segment built with these ring sizes.
inline size_t ring_offset(const uint64_t* ring_bytes, int world, int peer, int lane) {
  size_t off = sizeof(ShmHeader);
  for (int l = 0; l < lane; ++l) off += ring_stride(ring_bytes[l]) * world;
  return off + ring_stride(ring_bytes[lane]) * peer;
}

inline size_t segment_bytes(const uint64_t* ring_bytes, int world) {
  return ring_offset(ring_bytes, world, 0, kNumLanes - 1) +
         ring_stride(ring_bytes[kNumLanes - 1]) * world;
}

}  // namespace pscore
