// Shared moves: a payload the receiver keeps as it is (broadcast, all_gather, ...) and reads
// straight from the sender's memory is copied by both ranks at once. The receiver reads chunks
// of it (process_vm_readv) while the sender, idle until acknowledged, writes others into the
// receiver's buffer (process_vm_writev): two cores copy where one did. Both claim chunks from one
// word in the ring's header, so neither waits for the other and a busy sender simply leaves the
// receiver every chunk.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace pscore {

// The claim word: which message (the receiver's acknowledgement count + 1, which the sender
// knows as its ticket) and how many of its chunks are taken. A claim is a compare-and-swap on
// the whole word, so a sender that looks late can never take a chunk of the next message.
constexpr int kMoveChunkBits = 16;
inline uint64_t move_claim(uint64_t message, uint64_t chunk) {
  return (message << kMoveChunkBits) | chunk;  // the message number wraps after 2^48
}

struct MoveChunk {
  size_t offset;
  size_t nbytes;
};

// How a payload of n bytes is cut: whole under 128 KB (a system call costs 1.5-2 us, a 64 KB
// read 6), in 2 chunks up to 1 MB, then one per 512 KB up to 8, page-aligned. A broadcast of
// 256 KB between two ranks took 21-30 us in 2 chunks, 33 in 4 and 44-54 in 16 (82 us unshared).
size_t move_chunk_bytes(size_t n);

// Who claims, and what a receiver knows of the sender.
struct Claimer {
  bool receiver = false;
  size_t claims = 0;    // a receiver's claims of this message so far
  bool helper = false;  // the sender has said it is free to help with this message
};
constexpr Claimer kSender{};

// Takes the next chunk of message `message` (n bytes in all), or nullopt when every chunk is
// taken or the receiver has moved on to another message. A receiver takes all the rest at once
// when the sender is not free to help, or has taken none of the chunks since: the sender is busy
// with its own receives (all_gather), and one system call costs less than several.
std::optional<MoveChunk> claim_move_chunk(std::atomic<uint64_t>& claims, uint64_t message, size_t n,
                                          Claimer who);

}  // namespace pscore
