// Collective algorithms, written against transport/transport.h only. Each runs one operation of
// a group to completion on the calling thread; buffers are raw bytes of ctx.dtype.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/exchange.h"
#include "common/dtype.h"
#include "transport/transport.h"

namespace pscore {

// The group's view of one running operation: the transport and the operation's context.
struct Comm {
  Transport& transport;
  OpContext ctx;
  int rank() const { return transport.rank(); }
  int size() const { return transport.size(); }
  Exchange exchange() const { return Exchange(transport, ctx); }
};

// Block b of count elements split into n nearly equal blocks: [offset, offset + length).
struct Block {
  size_t offset;
  size_t length;
};
Block block_of(size_t count, int n, int b);
// Blocks [first, first + blocks) of count elements of esize bytes split into n blocks, as bytes.
struct Span {
  size_t offset;
  size_t nbytes;
};
Span span_of(size_t count, size_t esize, int n, int first, int blocks);

// A power-of-two set of virtual ranks laid on the group's n ranks: virtual v is rank
// (v + shift) mod n (shift: a root that becomes virtual rank 0).
struct VirtualRanks {
  int p2;
  int vrank;
  int shift;
  int n;
  int real(int v) const { return (v + shift) % n; }
};

// How a power-of-two algorithm runs on any n: the largest power of two p2 <= n, and the n - p2
// extra ranks folded in first. Among ranks < 2 (n - p2), each even rank sends its buffer to the
// odd rank above it, which folds it in, and gets the result back at the end.
class PowerOfTwoFold {
 public:
  explicit PowerOfTwoFold(const Comm& c);
  // Runs this rank's part of the fold: an even rank below 2 (n - p2) sends its buffer, waits
  // for the result and returns false (its call is done); the others return true.
  bool fold_in(Comm& c, void* buf, size_t nbytes, ReduceOp op) const;
  // Sends the result back to the even rank folded into this one, if any.
  void fold_out(Comm& c, const void* buf, size_t nbytes) const;
  int p2() const { return p2_; }
  int vrank() const { return vrank_; }  // this rank among the p2 (once fold_in returned true)
  int real_rank(int v) const { return v < rem_ ? v * 2 + 1 : v + rem_; }

 private:
  int rank_;
  int p2_ = 1;
  int rem_;
  int vrank_;
};

// Latency-optimal: log2(n) exchanges of the whole buffer (non-powers of two fold the extra ranks
// in first). `scratch` holds count elements.
void allreduce_recursive_doubling(Comm& c, void* buf, size_t count, ReduceOp op, void* scratch);
// Bandwidth-optimal: ring reduce-scatter then ring allgather, 2(n-1)/n of the buffer per rank,
// each incoming piece reduced straight from the transport as it arrives.
void allreduce_ring(Comm& c, void* buf, size_t count, ReduceOp op);
// Bandwidth-optimal in 2 log2(n) steps: recursive-halving reduce-scatter then recursive-doubling
// allgather (Rabenseifner's), the same bytes per rank as the ring on powers of two.
void allreduce_halving_doubling(Comm& c, void* buf, size_t count, ReduceOp op);

void broadcast_binomial(Comm& c, void* buf, size_t nbytes, int root);
// The root sends the buffer to every other rank in one exchange.
void broadcast_from_root(Comm& c, void* buf, size_t nbytes, int root);
// Scatter from the root then an allgather (ring, or recursive doubling on powers of two): for
// large buffers on many ranks.
void broadcast_scatter_allgather(Comm& c, void* buf, size_t count, int root,
                                 bool recursive_doubling);

// Binomial-tree reduce into the root's buf; other ranks' buf is left untouched (scratch used).
void reduce_binomial(Comm& c, void* buf, size_t count, ReduceOp op, int root, void* scratch);

// Recursive-doubling allgather in log2(p2) steps: buf holds p2 blocks of count elements split by
// block_of; virtual rank v holds block v and ends with all of them.
void allgather_recursive_doubling(Comm& c, void* buf, size_t count, const VirtualRanks& ranks);

// Ring allgather: outputs[r] (bytes[r] long) receives rank r's block. This rank's block is
// `input`, copied into outputs[rank()] while the first step's transfers run; nullptr: it is
// already there.
void allgather_ring(Comm& c, const void* input, const std::vector<void*>& outputs,
                    const std::vector<size_t>& bytes);

// Ring reduce-scatter: inputs[b] are this rank's contributions to block b (counts[b] elements);
// output receives the reduced block rank(). `scratch` holds sum(counts) elements.
void reduce_scatter_ring(Comm& c, const std::vector<const void*>& inputs,
                         const std::vector<size_t>& counts, void* output, ReduceOp op,
                         char* scratch);

// Recursive-halving reduce-scatter in log2(n) steps on a power-of-two group: inputs[b] are
// count elements each; output receives the reduced block rank(). `scratch` holds n * count.
void reduce_scatter_recursive_halving(Comm& c, const std::vector<const void*>& inputs, size_t count,
                                      void* output, ReduceOp op, char* scratch);

// Direct: non-roots send to / receive from the root, which moves all blocks concurrently.
void gather_direct(Comm& c, const void* input, size_t nbytes, const std::vector<void*>& outputs,
                   int root);
void scatter_direct(Comm& c, const std::vector<const void*>& inputs, void* output, size_t nbytes,
                    int root);

// Every pair exchanges its blocks concurrently; send_bytes/recv_bytes are per peer.
void all_to_all_pairwise(Comm& c, const std::vector<const void*>& inputs,
                         const std::vector<size_t>& send_bytes, const std::vector<void*>& outputs,
                         const std::vector<size_t>& recv_bytes);

// Dissemination barrier: ceil(log2 n) rounds of empty messages.
void barrier_dissemination(Comm& c);

}  // namespace pscore
