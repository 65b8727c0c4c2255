#include "transport/shm/shm_channel.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "common/clock.h"
#include "common/error.h"
#include "transport/shm/cross_memory.h"
#include "transport/shm/shared_move.h"

namespace pscore {

// The fence pairs with the one a sleeper issues after counting itself (ShmTransport::begin_wait):
// either this rank sees the sleeper, or the sleeper's last look sees what this rank published.
// A rank that polls is not rung at all: no read-modify-write on a line both ranks write, which
// cost a quarter of a 4 KB all_gather.
void ring_doorbell(ShmHeader* h) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_relaxed) == 0) return;
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->doorbell), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

void throw_if_aborted(const ShmHeader* h, const std::string& peer_name) {
  if (h->aborted.load(std::memory_order_acquire) != 1) return;
  std::string reason(h->reason, strnlen(h->reason, kShmReasonBytes));
  throw NetworkError(peer_name + " left the group: " + reason);
}

ShmChannel::ShmChannel(RingView out, RingView in, ShmHeader* peer_header, std::string peer_name,
                       SingleCopyBytes single_copy, bool helps_moves)
    : out_(out),
      in_(in),
      peer_(peer_header),
      peer_name_(std::move(peer_name)),
      single_copy_(single_copy),
      helps_moves_(helps_moves) {}

void ShmChannel::ring_peer() { ring_doorbell(peer_); }

namespace {
// Copies n bytes into the ring at logical position pos, wrapping at the end.
void copy_in(const RingView& r, uint64_t pos, const char* src, size_t n) {
  size_t at = pos % r.capacity;
  size_t first = std::min<size_t>(n, r.capacity - at);
  std::memcpy(r.data + at, src, first);
  if (n > first) std::memcpy(r.data, src + first, n - first);
}
}  // namespace

// A rank that only writes (a broadcast's root) would otherwise fill the ring of a peer that
// gave up on the group, and succeed.
size_t ShmChannel::write_some(const void* a, size_t na, const void* b, size_t nb) {
  throw_if_aborted(peer_, peer_name_);
  uint64_t head = out_.header->head.load(std::memory_order_relaxed);
  uint64_t space = out_.capacity - (head - known_tail_);
  if (space < na + nb) {  // only then is the reader's line worth a transfer
    known_tail_ = out_.header->tail.load(std::memory_order_acquire);
    space = out_.capacity - (head - known_tail_);
  }
  if (space == 0) return 0;
  size_t ka = std::min<uint64_t>(na, space);
  size_t kb = std::min<uint64_t>(nb, space - ka);
  if (ka + kb == 0) return 0;
  const bool timed = ka + kb >= RingGauge::kTimedBytes;
  const int64_t start = timed ? now_ns() : 0;
  if (ka) copy_in(out_, head, static_cast<const char*>(a), ka);
  if (kb) copy_in(out_, head + ka, static_cast<const char*>(b), kb);
  if (timed) ring_gauge_.record(ka + kb, now_ns() - start);
  out_.header->head.store(head + ka + kb, std::memory_order_release);
  ring_peer();
  return ka + kb;
}

// Hands the sink up to max arrived bytes (a multiple of granule) without consuming them.
size_t ShmChannel::pass_on(size_t max, size_t granule, const Sink& sink) const {
  const uint64_t tail = in_.header->tail.load(std::memory_order_relaxed);
  const uint64_t head = in_.header->head.load(std::memory_order_acquire);
  const size_t k = std::min<uint64_t>(head - tail, max) & ~(granule - 1);
  if (k == 0) return 0;
  const size_t at = tail % in_.capacity;
  const size_t first = std::min<size_t>(k, in_.capacity - at);
  if (sink.direct) {
    std::memcpy(sink.direct, in_.data + at, first);
    if (k > first) std::memcpy(static_cast<char*>(sink.direct) + first, in_.data, k - first);
  } else {
    sink.consume(in_.data + at, first);
    if (k > first) sink.consume(in_.data, k - first);
  }
  return k;
}

size_t ShmChannel::peek(void* dst, size_t n) {
  Sink sink;
  sink.direct = dst;
  return pass_on(n, 1, sink);
}

size_t ShmChannel::read_some(size_t max, size_t granule, const Sink& sink) {
  const size_t k = pass_on(max, granule, sink);
  if (k == 0) return 0;
  // This rank is the ring's only consumer, so no other writer races the store.
  in_.header->tail.store(in_.header->tail.load(std::memory_order_relaxed) + k,
                         std::memory_order_release);
  ring_peer();
  return k;
}

// The peer's flag lives in the header of the ring we write to: it vouches for the reader.
// A small payload is decided on its size alone: no shared line read, no probe counted.
bool ShmChannel::single_copy(size_t nbytes, Payload payload) {
  const bool by_size = single_copy_.by_size(nbytes, payload);
  if (!by_size && !single_copy_.gauged(nbytes, payload)) return false;
  if (out_.header->single_copy_ok.load(std::memory_order_acquire) != 1) return false;
  return by_size || !ring_gauge_.take_ring();
}

uint64_t ShmChannel::acknowledged() const {
  throw_if_aborted(peer_, peer_name_);
  return out_.header->acks.load(std::memory_order_acquire);
}

void ShmChannel::require_probed() const {
  if (in_.header->single_copy_ok.load(std::memory_order_relaxed) != 1)
    throw NetworkError(peer_name_ + " sent an address, but this rank never probed its memory");
}

size_t ShmChannel::read_peer(uint64_t address, void* dst, size_t n) {
  require_probed();
  return read_process_memory(peer_->pid, address, dst, n, peer_name_);
}

void ShmChannel::acknowledge() {
  in_.header->acks.fetch_add(1, std::memory_order_release);
  ring_peer();
}

// The payload being read is the one the next acknowledgement releases: the sender's ticket.
// The destination is posted before the claim word that names the message (release), and stays
// until every chunk is in place, so a sender that claims a chunk reads the right one.
void ShmChannel::begin_move(uint64_t address, void* dst, size_t nbytes) {
  require_probed();
  RingHeader* h = in_.header;
  move_ = Move{h->acks.load(std::memory_order_relaxed) + 1, address, static_cast<char*>(dst),
               nbytes, 0};
  h->move_destination.store(reinterpret_cast<uint64_t>(dst), std::memory_order_relaxed);
  h->pushed.store(0, std::memory_order_relaxed);
  h->claims.store(move_claim(move_.message, 0), std::memory_order_release);
  ring_peer();  // a sender asleep on its acknowledgement may help
}

size_t ShmChannel::move_some() {
  const bool helper = in_.header->helper.load(std::memory_order_acquire) == move_.message;
  if (auto c = claim_move_chunk(in_.header->claims, move_.message, move_.nbytes,
                                Claimer{true, move_.claims, helper})) {
    for (size_t got = 0; got < c->nbytes;)
      got += read_process_memory(peer_->pid, move_.from + c->offset + got,
                                 move_.to + c->offset + got, c->nbytes - got, peer_name_);
    move_.copied += c->nbytes;
    ++move_.claims;
  }
  return move_.copied + in_.header->pushed.load(std::memory_order_acquire);
}

bool ShmChannel::help_move(uint64_t ticket, const void* data, size_t nbytes) {
  if (!helps_moves_) return false;
  RingHeader* h = out_.header;
  if (h->helper.load(std::memory_order_relaxed) != ticket)
    h->helper.store(ticket, std::memory_order_release);
  const auto c = claim_move_chunk(h->claims, ticket, nbytes, kSender);
  if (!c) return false;
  const uint64_t to = h->move_destination.load(std::memory_order_relaxed) + c->offset;
  const char* from = static_cast<const char*>(data) + c->offset;
  for (size_t put = 0; put < c->nbytes;)
    put += write_process_memory(peer_->pid, to + put, from + put, c->nbytes - put, peer_name_);
  h->pushed.fetch_add(c->nbytes, std::memory_order_release);
  ring_peer();
  return true;
}

// The signal lives in the header of the ring this rank writes to, in the peer's segment; the
// doorbell wakes the peer if it sleeps (ring_doorbell's fence orders the store before its look).
void ShmChannel::signal(uint64_t value) {
  throw_if_aborted(peer_, peer_name_);
  out_.header->signal.store(value, std::memory_order_release);
  ring_peer();
}

bool ShmChannel::signalled(uint64_t value) const {
  return in_.header->signal.load(std::memory_order_acquire) >= value;
}

}  // namespace pscore
