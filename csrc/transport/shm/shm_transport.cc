#include "transport/shm/shm_transport.h"

#include <linux/futex.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <random>
#include <stdexcept>

#include "common/cores.h"
#include "common/error.h"
#include "transport/shm/cross_memory.h"

namespace pscore {
namespace {

uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

int pidfd_open(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  return -1;
#endif
}

std::string rank_name(int r) { return "rank " + std::to_string(r); }

// Small jobs' segments are allocated and mapped whole up front: otherwise a ring's pages fault in
// one by one as its head first goes round (two faults per 4 KB message for the first thousand
// messages, doubling their latency). Large ones stay lazy, committing only what they touch.
constexpr uint64_t kPrefaultBytes = 64ull << 20;
bool prefault(size_t segment_bytes) { return segment_bytes <= kPrefaultBytes; }

}  // namespace

ShmTransport::ShmTransport(int rank, int size, ShmOptions options)
    : rank_(rank), size_(size), options_(std::move(options)) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("rank " + std::to_string(rank) + " out of range for world size " +
                                std::to_string(size));
  uint64_t rings[kNumLanes] = {options_.ring_bytes, options_.p2p_ring_bytes};
  for (auto r : rings)
    if (r == 0 || r % 64 != 0) throw std::invalid_argument("ring sizes must be multiples of 64");
  single_copy_ = options_.single_copy.resolved(options_.ring_bytes, crowding(size));
  std::string name = "/pscore-" + std::to_string(::getpid()) + "-" + std::to_string(random_u64());
  const size_t nbytes = segment_bytes(rings, size);
  own_ = ShmSegment::create(name, nbytes, prefault(nbytes));
  ShmHeader* h = header();
  h->magic = kShmMagic;
  h->token = random_u64();
  h->pid = ::getpid();
  h->rank = rank;
  h->world = size;
  for (int l = 0; l < kNumLanes; ++l) h->ring_bytes[l] = rings[l];
  h->self_address = reinterpret_cast<uint64_t>(h);
  peers_.resize(size);
  pidfds_.assign(size, -1);
  writes_peer_.assign(size, false);
  channels_.resize(static_cast<size_t>(size) * kNumLanes);
}

ShmTransport::~ShmTransport() {
  for (int fd : pidfds_)
    if (fd >= 0) ::close(fd);
}

void ShmTransport::connect(const std::vector<std::string>& names,
                           const std::vector<uint64_t>& tokens) {
  if (static_cast<int>(names.size()) != size_ || static_cast<int>(tokens.size()) != size_)
    throw std::invalid_argument("connect: need one segment per rank");
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    ShmSegment seg = ShmSegment::open(names[p], prefault(own_.nbytes()));
    auto* h = static_cast<ShmHeader*>(seg.data());
    if (seg.nbytes() < sizeof(ShmHeader) || h->magic != kShmMagic || h->token != tokens[p] ||
        h->world != size_ || h->rank != p || seg.nbytes() < segment_bytes(h->ring_bytes, size_))
      throw NetworkError(rank_name(p) + ": shared-memory segment " + names[p] +
                         " is not the one it published (another host or job?)");
    peers_[p] = std::move(seg);
    pidfds_[p] = pidfd_open(h->pid);
    if (options_.single_copy.any()) probe_single_copy(p);
  }
  const Crowding shared_cores = crowding(size_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    for (int lane = 0; lane < kNumLanes; ++lane) {
      RingView out = ring(peers_[p], rank_, lane);
      RingView in = ring(own_, p, lane);
      // Point-to-point sends stay buffered: one must complete before the peer posts its receive.
      SingleCopyBytes single_copy = lane == kCollectiveLane
                                        ? options_.single_copy.resolved(out.capacity, shared_cores)
                                        : SingleCopyBytes::off();
      const bool helps = lane == kCollectiveLane && writes_peer_[p];
      channels_[p * kNumLanes + lane] =
          std::make_unique<ShmChannel>(out, in, peer_header(p), rank_name(p), single_copy, helps);
    }
  }
}

// Reads the peer's token out of its own mapping of its header; success tells the peer (through
// the flag in the ring it writes to us) that its large payloads may travel as addresses.
// Then writes the token back unchanged: a rank that may also write the peer's memory helps it
// move this rank's payloads (shared_move.h).
void ShmTransport::probe_single_copy(int peer) {
  const ShmHeader* h = peer_header(peer);
  const uint64_t token_address = h->self_address + offsetof(ShmHeader, token);
  if (!can_read_process_memory(h->pid, token_address, h->token)) return;
  ring(own_, peer, kCollectiveLane).header->single_copy_ok.store(1, std::memory_order_release);
  writes_peer_[peer] = can_write_process_memory(h->pid, token_address, h->token);
}

bool ShmTransport::single_copy_from(int peer) const {
  if (peer == rank_ || !peers_.at(peer).data()) return false;
  return ring(own_, peer, kCollectiveLane).header->single_copy_ok.load() == 1;
}

ShmHeader* ShmTransport::peer_header(int peer) const {
  return static_cast<ShmHeader*>(peers_[peer].data());
}

RingView ShmTransport::ring(const ShmSegment& seg, int peer, int lane) const {
  auto* h = static_cast<ShmHeader*>(seg.data());
  char* base = static_cast<char*>(seg.data()) + ring_offset(h->ring_bytes, size_, peer, lane);
  return RingView{reinterpret_cast<RingHeader*>(base), base + sizeof(RingHeader),
                  h->ring_bytes[lane]};
}

Channel& ShmTransport::channel(int peer, int lane) {
  auto& c = channels_.at(static_cast<size_t>(peer) * kNumLanes + lane);
  if (!c) throw std::logic_error("no channel to rank " + std::to_string(peer));
  return *c;
}

uint32_t ShmTransport::begin_wait() {
  header()->sleepers.fetch_add(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with ring_doorbell's
  return header()->doorbell.load(std::memory_order_seq_cst);
}

void ShmTransport::wait(const std::vector<WaitItem>&, int timeout_ms, uint32_t token) {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header()->doorbell), FUTEX_WAIT, token,
            timeout_ms < 0 ? nullptr : &ts, nullptr, 0);
}

void ShmTransport::end_wait() { header()->sleepers.fetch_sub(1, std::memory_order_seq_cst); }

void ShmTransport::check_peer(int peer) {
  ShmHeader* h = peer_header(peer);
  if (h) throw_if_aborted(h, rank_name(peer));
  int fd = pidfds_[peer];
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0)
      throw NetworkError(rank_name(peer) + " (pid " + std::to_string(h->pid) + ") died");
  }
}

void ShmTransport::abort(const std::string& reason) {
  ShmHeader* h = header();
  uint32_t expected = 0;
  if (!h->aborted.compare_exchange_strong(expected, 2)) return;
  size_t n = std::min(reason.size(), kShmReasonBytes - 1);
  std::memcpy(h->reason, reason.data(), n);
  h->reason[n] = '\0';
  h->aborted.store(1, std::memory_order_release);
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && peers_[p].data()) ring_doorbell(peer_header(p));
}

}  // namespace pscore
