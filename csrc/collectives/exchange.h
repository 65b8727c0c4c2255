// Exchange: a set of sends and receives to several peers progressed together until all are done,
// with spinning then sleeping, deadlines, header checks and errors that name peer and operation.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <string>
#include <vector>

#include "collectives/message.h"
#include "collectives/yield_gauge.h"
#include "common/clock.h"
#include "common/dtype.h"
#include "transport/transport.h"

namespace pscore {

// What the current operation is, for headers and error messages.
struct OpContext {
  OpKind kind = OpKind::kAllreduce;
  uint64_t seq = 0;
  DType dtype = DType::kUInt8;
  uint32_t tag = 0;
  int lane = kCollectiveLane;
  int64_t timeout_ms = 30000;
  // The operation's deadline, shared by its exchanges and armed by the first that waits
  // (ProcessGroup::run_guarded); nullptr: none.
  LazyDeadline* deadline = nullptr;
  int spin_us = 0;   // busy-poll this long before sleeping (0 when ranks outnumber cores)
  int yield_us = 0;  // then poll, giving the core away (sched_yield) each time, this long
  // When set, told what each sched_yield cost (the group's YieldGauge, which closes the yield
  // window while yields cost a whole time slice).
  YieldGauge* yield_gauge = nullptr;
  uint64_t nbytes = 0;  // the operation's size, for reports
  // Whether a sender may copy parts of its moved payloads itself (shared moves): only where it
  // cannot be preempted holding a part the receiver waits for (ranks fit on the cores) and does
  // not take a core from its caller (a blocking call).
  bool help_moves = false;
  // When set, where the exchange records the peer it goes to sleep on (the stall inspector).
  std::atomic<int>* waiting_on = nullptr;
};

class Exchange {
 public:
  Exchange(Transport& transport, const OpContext& ctx) : transport_(transport), ctx_(ctx) {
    items_.reserve(kUsualItems);
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void send(int peer, const void* data, size_t nbytes);
  // Sends a payload the peer folds into its buffer (its recv_reduce).
  void send_to_fold(int peer, const void* data, size_t nbytes);
  // Sends a payload the peer receives at once with other peers' (a gather's root).
  void send_fan_in(int peer, const void* data, size_t nbytes);
  // Receives nbytes from peer into dst.
  void recv(int peer, void* dst, size_t nbytes);
  // Receives nbytes of ctx.dtype from peer and folds them into dst: dst = dst op incoming.
  void recv_reduce(int peer, void* dst, size_t nbytes, ReduceOp op);
  // A step with no payload where the channel carries signals (Channel::signals): raises this
  // rank's signal to peer, and waits for peer's. A message in place of the awaited signal is an
  // error naming the peer's operation, as for a message.
  void signal(int peer);
  void await_signal(int peer);
  // Copies nbytes from src to dst in this process once the sends have gone out, so the copy
  // overlaps the peers' reads (before them when a send reads dst or a receive writes src).
  void copy(void* dst, const void* src, size_t nbytes);
  // Progresses every posted send and receive until all are complete. Throws TimeoutError or
  // NetworkError naming this rank, the peer, the operation and the byte counts.
  void run();

 private:
  struct Item {
    int peer;
    bool is_send;
    char* data;
    size_t nbytes;
    ReduceOp op;
    bool reduce;               // the receiver folds the payload into its buffer
    MessageHeader header;      // outgoing, or the one received
    bool fan_in = false;       // send: the receiver takes other peers' payloads at once
    size_t done = 0;           // bytes of header + payload + padding (or address) moved so far
    bool single_copy = false;  // the payload travels as its address (kSingleCopyFlag)
    uint64_t address = 0;      // receiver: where the payload lies in the sender's memory
    uint64_t ticket = 0;       // sender: the acknowledgement count that releases the buffer
    bool signal = false;       // a signal (Exchange::signal / await_signal), not a message
    // Bytes this item moves in all: header, payload and padding to 8 or the payload's address.
    size_t total() const {
      return sizeof(MessageHeader) + nbytes + (single_copy ? 8 : padding_for(nbytes));
    }
    size_t prefix() const { return sizeof(MessageHeader) + (single_copy ? 8 : 0); }
    bool finished() const { return done == total(); }
  };

  struct LocalCopy {
    char* dst;
    const char* src;
    size_t nbytes;
  };

  bool step(Item& it);
  // Runs the local copies that must precede the transfers (`before_sends`), or the others.
  void run_copies(bool before_sends);
  bool step_send(Item& it, Channel& ch);
  bool step_recv(Item& it, Channel& ch);
  bool step_send_address(Item& it, Channel& ch);
  bool step_recv_address(Item& it, Channel& ch);
  bool step_signal(Item& it, Channel& ch);
  // Marks the sends whose payload the receiver will read from this rank's memory.
  void choose_single_copy();
  // What the receiver of a send does with its payload, and whether this rank waits meanwhile.
  Payload payload_of(const Item& send) const;
  void check_header(const Item& it) const;
  size_t largest_item() const;  // in bytes
  // Steps every item once; whether any moved.
  bool step_all();
  // The operation's deadline, armed on first use (never, without one).
  const Deadline& deadline();
  void check_peers();
  // The peer this rank waits on: the first unfinished receive's, else the first send's.
  const Item* waited_item() const;
  std::string describe(const Item& it) const;
  [[noreturn]] void fail_timeout();

  static constexpr size_t kUsualItems = 4;  // a step's send and receive on both sides
  static constexpr size_t kUsualCopies = 1;

  Transport& transport_;
  OpContext ctx_;
  // The items and copies of a usual exchange live in the object itself, the rest on the heap:
  // a small collective's fixed cost had a malloc and a free per step.
  alignas(std::max_align_t)
      std::byte arena_[kUsualItems * sizeof(Item) + kUsualCopies * sizeof(LocalCopy)];
  std::pmr::monotonic_buffer_resource pool_{arena_, sizeof(arena_)};
  std::pmr::vector<Item> items_{&pool_};
  std::pmr::vector<LocalCopy> copies_{&pool_};
  size_t pending_ = 0;
  size_t pending_receives_ = 0;
};

}  // namespace pscore
