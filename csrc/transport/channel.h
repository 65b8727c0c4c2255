// A non-blocking duplex byte stream to one peer on one lane; the collectives' engine drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "common/error.h"

namespace pscore {

// Where received bytes go: straight into `direct` when set (a copy at most), else handed in place
// to `consume` (e.g. to reduce from the medium into the destination without a staging copy).
struct Sink {
  void* direct = nullptr;
  std::function<void(const void* src, size_t nbytes)> consume;
};

// What the receiver does with a payload, and whether its sender waits on anything else meanwhile.
// kMoved: kept as it is, while its sender has other transfers: receives (all_gather, all_to_all)
// or sends to kFanOutPeers peers or more (a scatter's root). kMovedInAllReduce: the same, in an
// all_reduce (its second half). kMovedOneWay: kept as it is, sent in an exchange that only sends,
// to fewer peers (a broadcast tree's). kMovedFanIn: kept as it is by a receiver that takes other
// peers' payloads at once (a gather's root; Exchange::send_fan_in). kReduced: folded into the
// receiver's buffer (Exchange::send_to_fold); kReducedInAllReduce: the same, in an all_reduce;
// kReducedOneWay: the same, outside an all_reduce, sent in an exchange that only sends (a reduce's
// leaves).
enum class Payload : uint8_t {
  kMoved,
  kMovedInAllReduce,
  kMovedOneWay,
  kMovedFanIn,
  kReduced,
  kReducedInAllReduce,
  kReducedOneWay
};

// An exchange that only sends, to this many peers or more, sends kMoved payloads.
inline constexpr size_t kFanOutPeers = 3;

class Channel {
 public:
  virtual ~Channel() = default;
  // Takes up to na bytes of a then nb bytes of b; returns how many it took (0 when full).
  // Throws NetworkError when the peer is gone.
  virtual size_t write_some(const void* a, size_t na, const void* b, size_t nb) = 0;
  // Hands at most `max` arrived bytes to the sink, always a multiple of `granule` (a power of two
  // <= 8 that divides max); returns how many. Throws NetworkError when the peer is gone.
  virtual size_t read_some(size_t max, size_t granule, const Sink& sink) = 0;
  // Reads up to `header_bytes` of a message's header into `header`; returns how many. A channel
  // whose reads are system calls may take up to `rest_bytes` of the message behind the header in
  // the same call and hand them to the next read_some, once the caller has checked the header.
  // Throws NetworkError when the peer is gone.
  virtual size_t read_header(void* header, size_t header_bytes, size_t rest_bytes) {
    (void)rest_bytes;
    Sink sink;
    sink.direct = header;
    return read_some(header_bytes, 1, sink);
  }
  // Copies up to n arrived bytes to dst without consuming them; returns how many. Throws
  // NetworkError when the peer is gone and nothing more will arrive.
  virtual size_t peek(void* dst, size_t n) = 0;

  // Single-copy transfers, where the transport offers them (same host, and the receiver may read
  // the sender's memory): the sender publishes a payload's address in place of its bytes, the
  // receiver copies the bytes straight out of the sender's memory, then acknowledges, and only
  // then may the sender reuse the buffer. Acknowledgements come in publishing order.
  // Sender: whether a payload of nbytes should travel as an address. Called once per payload.
  virtual bool single_copy(size_t nbytes, Payload payload) {
    (void)nbytes, (void)payload;
    return false;
  }
  // Sender: records one more published address; returns the acknowledgement count that means
  // the receiver has read it.
  virtual uint64_t publish() { return 0; }
  // Sender: acknowledgements so far. Throws NetworkError when the peer has left the group.
  virtual uint64_t acknowledged() const { return 0; }
  // Receiver: copies up to n bytes at the sender's `address` to dst; returns how many (> 0).
  virtual size_t read_peer(uint64_t address, void* dst, size_t n) {
    (void)address, (void)dst, (void)n;
    throw NetworkError("the peer sent an address, but this channel cannot read its memory");
  }
  // Receiver of a payload it keeps as it is (not folded in): `begin_move` says where the nbytes
  // at the sender's `address` go; each `move_some` then copies a part and returns how many bytes
  // are in place so far (nbytes once all are). The sender may copy parts too (help_move).
  virtual void begin_move(uint64_t address, void* dst, size_t nbytes) {
    (void)address, (void)dst, (void)nbytes;
    throw NetworkError("the peer sent an address, but this channel cannot read its memory");
  }
  virtual size_t move_some() { return 0; }
  // Sender, while the payload it published as `ticket` waits to be acknowledged: copies a part of
  // it into the receiver's buffer when the receiver is moving it; returns whether it did.
  virtual bool help_move(uint64_t ticket, const void* data, size_t nbytes) {
    (void)ticket, (void)data, (void)nbytes;
    return false;
  }
  // Receiver: the last published payload has been read.
  virtual void acknowledge() {}

  // Signals, where the transport offers them (shared memory): a word the peer polls instead of a
  // message, for steps that carry no payload (a barrier's). Every channel of a transport answers
  // `signals()` alike.
  virtual bool signals() const { return false; }
  // Raises this rank's signal to the peer to `value` (above 0, and larger for each later
  // operation) and wakes the peer if it sleeps. Throws NetworkError when the peer has left the
  // group.
  virtual void signal(uint64_t value) {
    (void)value;
    throw NetworkError("this channel carries no signals");
  }
  // Whether the peer's signal has reached `value`.
  virtual bool signalled(uint64_t value) const {
    (void)value;
    throw NetworkError("this channel carries no signals");
  }
};

}  // namespace pscore
