#include "collectives/exchange.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/reduce.h"
#include "common/stream_copy.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PSCORE_CPU_RELAX() _mm_pause()
#else
#define PSCORE_CPU_RELAX() ((void)0)
#endif

namespace pscore {
namespace {

constexpr size_t kHeaderBytes = sizeof(MessageHeader);
constexpr size_t kAddressBytes = sizeof(uint64_t);
// A reducing single-copy receive stages this much per step in a cache-sized scratch, then folds
// it in.
constexpr size_t kReduceScratchBytes = 256 << 10;
constexpr int kWaitSliceMs = 50;  // wake up this often to look for dead peers
// A rank waiting on a transfer in flight polls for about as long as the transfer takes before it
// sleeps: a futex wake-up costs tens of microseconds, a 1 MB single-copy read about 50.
constexpr size_t kPollBytesPerUs = 2000;  // a slow rate, so the estimate errs long
constexpr int64_t kMaxTransferPollUs = 2000;
constexpr int64_t kPeerCheckUs = 50000;
// Where the ranks fit on the cores, an exchange polls this many times before its first clock
// reading: a small message's peer is usually well under a microsecond away, and a barrier's
// whole exchange cost less than the two clock readings it used to take.
constexpr int kPollsBeforeClock = 64;
const char kZeros[8] = {0};

}  // namespace

void Exchange::send(int peer, const void* data, size_t nbytes) {
  Item it{peer,           true,           const_cast<char*>(static_cast<const char*>(data)),
          nbytes,         ReduceOp::kSum, false,
          MessageHeader{}};
  it.header.op = static_cast<uint8_t>(ctx_.kind);
  it.header.dtype = static_cast<uint8_t>(ctx_.dtype);
  it.header.seq = ctx_.seq;
  it.header.nbytes = nbytes;
  it.header.tag = ctx_.tag;
  items_.push_back(it);
  ++pending_;
}

void Exchange::send_to_fold(int peer, const void* data, size_t nbytes) {
  send(peer, data, nbytes);
  items_.back().reduce = true;
}

void Exchange::send_fan_in(int peer, const void* data, size_t nbytes) {
  send(peer, data, nbytes);
  items_.back().fan_in = true;
}

void Exchange::recv(int peer, void* dst, size_t nbytes) {
  items_.push_back(
      Item{peer, false, static_cast<char*>(dst), nbytes, ReduceOp::kSum, false, MessageHeader{}});
  ++pending_;
  ++pending_receives_;
}

void Exchange::recv_reduce(int peer, void* dst, size_t nbytes, ReduceOp op) {
  items_.push_back(Item{peer, false, static_cast<char*>(dst), nbytes, op, true, MessageHeader{}});
  ++pending_;
  ++pending_receives_;
}

void Exchange::signal(int peer) {
  send(peer, nullptr, 0);
  items_.back().signal = true;
}

void Exchange::await_signal(int peer) {
  recv(peer, nullptr, 0);
  items_.back().signal = true;
}

void Exchange::copy(void* dst, const void* src, size_t nbytes) {
  if (nbytes && dst != src)
    copies_.push_back(LocalCopy{static_cast<char*>(dst), static_cast<const char*>(src), nbytes});
}

std::string Exchange::describe(const Item& it) const {
  return "rank " + std::to_string(transport_.rank()) + (it.is_send ? " -> rank " : " <- rank ") +
         std::to_string(it.peer) + ": " + op_kind_name(ctx_.kind) + " #" + std::to_string(ctx_.seq);
}

namespace {
bool overlaps(const char* a, size_t na, const char* b, size_t nb) {
  return na != 0 && nb != 0 && a < b + nb && b < a + na;
}
}  // namespace

// A copy runs first when a send reads its destination or a receive writes its source: then the
// order is the one the algorithm wrote.
void Exchange::run_copies(bool before_sends) {
  for (const auto& c : copies_) {
    bool ordered = false;
    for (const auto& it : items_)
      ordered |= it.is_send ? overlaps(c.dst, c.nbytes, it.data, it.nbytes)
                            : overlaps(c.src, c.nbytes, it.data, it.nbytes);
    if (ordered != before_sends) continue;
    if (c.nbytes >= stream_copy_bytes() && !overlaps(c.dst, c.nbytes, c.src, c.nbytes))
      copy_streaming(c.dst, c.src, c.nbytes);
    else
      std::memmove(c.dst, c.src, c.nbytes);
  }
}

// A send whose buffer this exchange also receives into keeps the ring: the receiver must read
// the bytes as they were when the send was posted.
void Exchange::choose_single_copy() {
  for (auto& s : items_) {
    if (!s.is_send || s.signal ||
        !transport_.channel(s.peer, ctx_.lane).single_copy(s.nbytes, payload_of(s)))
      continue;
    bool aliased = false;
    for (const auto& r : items_)
      aliased |= !r.is_send && overlaps(s.data, s.nbytes, r.data, r.nbytes);
    if (aliased) continue;
    s.single_copy = true;
    s.header.flags = kSingleCopyFlag;
  }
}

Payload Exchange::payload_of(const Item& send) const {
  const bool all_reduce = ctx_.kind == OpKind::kAllreduce;
  if (send.reduce && all_reduce) return Payload::kReducedInAllReduce;
  if (send.reduce) return pending_receives_ == 0 ? Payload::kReducedOneWay : Payload::kReduced;
  if (send.fan_in) return Payload::kMovedFanIn;
  const size_t sends = pending_ - pending_receives_;
  if (pending_receives_ == 0 && sends < kFanOutPeers) return Payload::kMovedOneWay;
  return all_reduce ? Payload::kMovedInAllReduce : Payload::kMoved;
}

// A single-copy send writes [header | address], then holds the buffer until acknowledged.
bool Exchange::step_send_address(Item& it, Channel& ch) {
  if (it.done < it.prefix()) {
    const uint64_t address = reinterpret_cast<uint64_t>(it.data);
    const char* a = reinterpret_cast<const char*>(&address);
    size_t k;
    if (it.done < kHeaderBytes)
      k = ch.write_some(reinterpret_cast<const char*>(&it.header) + it.done, kHeaderBytes - it.done,
                        a, kAddressBytes);
    else
      k = ch.write_some(a + (it.done - kHeaderBytes), it.prefix() - it.done, nullptr, 0);
    it.done += k;
    if (it.done == it.prefix()) it.ticket = ch.publish();
    return k > 0;
  }
  if (ch.acknowledged() < it.ticket)  // once its own receives are done, a rank helps move
    return ctx_.help_moves && pending_receives_ == 0 && ch.help_move(it.ticket, it.data, it.nbytes);
  it.done = it.total();
  return true;
}

// A send streams [header | payload | padding] through write_some.
bool Exchange::step_send(Item& it, Channel& ch) {
  if (it.single_copy) return step_send_address(it, ch);
  size_t pad = padding_for(it.nbytes);
  size_t k;
  if (it.done < kHeaderBytes) {
    k = ch.write_some(reinterpret_cast<const char*>(&it.header) + it.done, kHeaderBytes - it.done,
                      it.data, it.nbytes);
  } else if (it.done < kHeaderBytes + it.nbytes) {
    size_t off = it.done - kHeaderBytes;
    k = ch.write_some(it.data + off, it.nbytes - off, kZeros, pad);
  } else {
    size_t off = it.done - kHeaderBytes - it.nbytes;
    k = ch.write_some(kZeros + off, pad - off, nullptr, 0);
  }
  it.done += k;
  return k > 0;
}

void Exchange::check_header(const Item& it) const {
  MessageHeader expected;
  expected.op = static_cast<uint8_t>(ctx_.kind);
  expected.dtype = static_cast<uint8_t>(ctx_.dtype);
  expected.seq = ctx_.seq;
  expected.nbytes = it.nbytes;
  expected.tag = ctx_.tag;
  if (std::memcmp(&it.header, &expected, sizeof(expected)) == 0) return;  // the usual case
  const std::string why = message_header_mismatch(it.header, expected);
  if (!why.empty()) throw NetworkError(describe(it) + ": " + why);
}

// A receive reads the header (checked), then the payload into or onto dst, then the padding.
bool Exchange::step_recv(Item& it, Channel& ch) {
  size_t k;
  if (it.done < kHeaderBytes) {
    char* header = reinterpret_cast<char*>(&it.header);
    if (it.done == 0) {
      k = ch.read_header(header, kHeaderBytes, it.total() - kHeaderBytes);
    } else {
      Sink sink;
      sink.direct = header + it.done;
      k = ch.read_some(kHeaderBytes - it.done, 1, sink);
    }
    it.done += k;
    if (it.done == kHeaderBytes) {
      check_header(it);
      it.single_copy = (it.header.flags & kSingleCopyFlag) != 0;
    }
    return k > 0;
  }
  if (it.single_copy) return step_recv_address(it, ch);
  size_t off = it.done - kHeaderBytes;
  if (off < it.nbytes) {
    Sink sink;
    size_t granule = 1;
    size_t at = off;  // where the next consumed piece lands; outlives the read below
    if (it.reduce) {
      granule = dtype_size(ctx_.dtype);
      sink.consume = [&](const void* src, size_t n) {
        reduce_into(it.data + at, src, n / granule, ctx_.dtype, it.op);
        at += n;
      };
    } else {
      sink.direct = it.data + off;
    }
    k = ch.read_some(it.nbytes - off, granule, sink);
  } else {
    char scratch[8];
    Sink sink;
    sink.direct = scratch;
    k = ch.read_some(it.total() - it.done, 1, sink);
  }
  it.done += k;
  return k > 0;
}

// A single-copy receive reads the address, then the payload straight from the sender's memory
// (a moved one with the sender's help; a reduced one staged in a cache-sized scratch and folded
// in), then acknowledges so the sender may reuse its buffer.
bool Exchange::step_recv_address(Item& it, Channel& ch) {
  if (it.done < it.prefix()) {
    Sink sink;
    sink.direct = reinterpret_cast<char*>(&it.address) + (it.done - kHeaderBytes);
    const size_t k = ch.read_some(it.prefix() - it.done, 1, sink);
    it.done += k;
    if (it.done == it.prefix() && !it.reduce && it.nbytes)
      ch.begin_move(it.address, it.data, it.nbytes);
    if (it.finished()) ch.acknowledge();
    return k > 0;
  }
  const size_t before = it.done;
  if (it.reduce) {
    static thread_local std::vector<char> scratch(kReduceScratchBytes);
    const size_t off = it.done - it.prefix();
    const size_t n = std::min(it.nbytes - off, kReduceScratchBytes);
    for (size_t got = 0; got < n;)
      got += ch.read_peer(it.address + off + got, scratch.data() + got, n - got);
    reduce_into(it.data + off, scratch.data(), n / dtype_size(ctx_.dtype), ctx_.dtype, it.op);
    it.done += n;
  } else {
    it.done = it.prefix() + ch.move_some();
  }
  if (it.finished()) ch.acknowledge();
  return it.done != before;
}

// The signal's value is the operation's sequence number + 1: a fresh ring's word reads 0. The
// ring is looked at before the signal: the peer raises its signal before it sends the next
// operation's messages, so a message seen with the signal still low is not that next one.
bool Exchange::step_signal(Item& it, Channel& ch) {
  if (it.is_send) {
    ch.signal(ctx_.seq + 1);
  } else {
    MessageHeader arrived;
    const size_t k = ch.peek(&arrived, sizeof arrived);
    if (!ch.signalled(ctx_.seq + 1)) {
      if (k < sizeof arrived) return false;
      it.header = arrived;
      check_header(it);  // names the peer's operation
      throw NetworkError(describe(it) +
                         ": the peer sent a message where this rank awaits its signal");
    }
  }
  it.done = it.total();
  return true;
}

bool Exchange::step(Item& it) {
  if (it.finished()) return false;
  Channel& ch = transport_.channel(it.peer, ctx_.lane);
  bool progressed;
  try {
    progressed = it.signal    ? step_signal(it, ch)
                 : it.is_send ? step_send(it, ch)
                              : step_recv(it, ch);
  } catch (const NetworkError& e) {
    std::string msg = e.what();
    if (msg.rfind(describe(it), 0) == 0) throw;  // already names this operation
    throw NetworkError(describe(it) + ": " + msg);
  }
  if (it.finished()) {
    --pending_;
    if (!it.is_send) --pending_receives_;
  }
  return progressed;
}

void Exchange::check_peers() {
  for (const auto& it : items_) {
    try {
      transport_.check_peer(it.peer);
    } catch (const NetworkError& e) {
      throw NetworkError(describe(it) + ": " + e.what());
    }
  }
}

const Exchange::Item* Exchange::waited_item() const {
  const Item* worst = nullptr;
  for (const auto& it : items_) {
    if (it.finished()) continue;
    if (!worst || (!it.is_send && worst->is_send)) worst = &it;
  }
  return worst;
}

void Exchange::fail_timeout() {
  const Item* worst = waited_item();
  size_t moved = worst->done > worst->prefix() ? worst->done - worst->prefix() : 0;
  moved = std::min(moved, worst->nbytes);
  throw TimeoutError(describe(*worst) + " timed out after " + std::to_string(ctx_.timeout_ms) +
                     " ms " + (worst->is_send ? "sending " : "waiting for ") +
                     std::to_string(worst->nbytes) + " bytes (" + std::to_string(moved) +
                     " moved)");
}

size_t Exchange::largest_item() const {
  size_t largest = 0;
  for (const auto& it : items_) largest = std::max(largest, it.nbytes);
  return largest;
}

bool Exchange::step_all() {
  bool progressed = false;
  for (auto& it : items_) progressed |= step(it);
  return progressed;
}

const Deadline& Exchange::deadline() {
  static const Deadline never = Deadline::never();
  return ctx_.deadline ? ctx_.deadline->get() : never;
}

void Exchange::run() {
  choose_single_copy();
  run_copies(true);
  step_all();  // the sends go out (or start) first
  run_copies(false);
  const size_t largest = largest_item();
  const bool polls = largest < transport_.polled_item_limit();
  if (ctx_.spin_us > 0 && polls)
    for (int i = 0; i < kPollsBeforeClock && pending_ > 0; ++i)
      if (!step_all()) PSCORE_CPU_RELAX();
  if (pending_ == 0) return;
  deadline();  // counts from here if no earlier exchange of the operation waited
  int64_t idle_since = now_us();
  int64_t last_check = idle_since;
  std::vector<WaitItem> waits;
  // The windows grow by the largest item's expected transfer time.
  const int64_t extra =
      std::min(static_cast<int64_t>(largest / kPollBytesPerUs), kMaxTransferPollUs);
  const int64_t spin_us = ctx_.spin_us && polls ? ctx_.spin_us + extra : 0;
  const int64_t yield_us = ctx_.yield_us && polls ? ctx_.yield_us + extra : 0;
  while (pending_ > 0) {
    bool progressed = step_all();
    if (pending_ == 0) break;
    int64_t now = now_us();
    if (progressed) {
      idle_since = now;
      continue;
    }
    if (now - idle_since < spin_us) {
      PSCORE_CPU_RELAX();
      continue;
    }
    if (now - idle_since < yield_us) {
      sched_yield();  // a peer waiting for this core runs now, and no wake-up syscall is needed
      if (ctx_.yield_gauge) ctx_.yield_gauge->record(now_us() - now);
      continue;
    }
    // Announce the sleep, look once more (a peer may have signalled in between), then block.
    {
      SleepTurn turn(transport_);
      progressed = step_all();
      if (!progressed && pending_ > 0) {
        waits.clear();
        for (const auto& it : items_)
          if (!it.finished()) waits.push_back(WaitItem{it.peer, ctx_.lane, it.is_send});
        if (ctx_.waiting_on) ctx_.waiting_on->store(waited_item()->peer, std::memory_order_relaxed);
        turn.wait(waits, deadline().remaining_ms_at_most(kWaitSliceMs));
      }
    }
    if (progressed) {
      idle_since = now_us();
      continue;
    }
    now = now_us();
    if (now - last_check >= kPeerCheckUs) {
      last_check = now;
      check_peers();
    }
    if (deadline().expired()) fail_timeout();
  }
}

}  // namespace pscore
