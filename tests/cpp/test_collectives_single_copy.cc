// Single-copy transfers over a real ShmTransport: large collective payloads travel as addresses
// and the receiver reads them with process_vm_readv while the sender writes parts of them with
// process_vm_writev (shared moves). Ranks as threads (every collective, exact results, a
// threshold of 64 bytes so most messages take the path; the claims of a shared move) and as
// forked processes (a probe that seccomp refuses falls back to the rings, a refused write to the
// receiver reading alone; a sender that dies after publishing its address is a NetworkError
// naming it).
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/exchange.h"
#include "collectives/message.h"
#include "collectives/process_group.h"
#include "common/clock.h"
#include "common/cores.h"
#include "common/error.h"
#include "common/stream_copy.h"
#include "in_threads.h"
#include "transport/shm/shared_move.h"
#include "transport/shm/shm_transport.h"
namespace pscore {
namespace {

using Groups = std::vector<std::shared_ptr<ProcessGroup>>;

ShmOptions small_rings(uint64_t single_copy_bytes) {
  ShmOptions so;
  so.ring_bytes = 4096;  // a ring-borne message laps it; an address fits at once
  so.p2p_ring_bytes = 1024;
  so.single_copy = {single_copy_bytes, single_copy_bytes};
  return so;
}

// Rings of 1 MB with the default single-copy sizes.
ShmOptions megabyte_rings() {
  ShmOptions so;
  so.ring_bytes = 1 << 20;
  so.p2p_ring_bytes = 4096;
  return so;
}

// The context of a hand-built all_gather exchange (the Exchange keeps a copy).
OpContext allgather_context(LazyDeadline* deadline) {
  OpContext ctx;
  ctx.kind = OpKind::kAllgather;
  ctx.deadline = deadline;
  return ctx;
}

GroupOptions group_options() {
  GroupOptions o;
  o.timeout_ms = 20000;
  o.large_broadcast_bytes = 64;
  return o;
}

std::vector<std::shared_ptr<ShmTransport>> connected(int n, const ShmOptions& so) {
  std::vector<std::shared_ptr<ShmTransport>> s(n);
  std::vector<std::string> names(n);
  std::vector<uint64_t> tokens(n);
  for (int r = 0; r < n; ++r) {
    s[r] = std::make_shared<ShmTransport>(r, n, so);
    names[r] = s[r]->segment_name();
    tokens[r] = s[r]->token();
  }
  in_threads(n, [&](int r) { s[r]->connect(names, tokens); });
  for (auto& t : s) t->unlink();
  return s;
}

Groups groups_over(const std::vector<std::shared_ptr<ShmTransport>>& s, size_t small_allreduce) {
  Groups g;
  GroupOptions o = group_options();
  o.small_allreduce_bytes = small_allreduce;
  for (auto& t : s) g.push_back(std::make_shared<ProcessGroup>(t, o));
  return g;
}

// Every collective at sizes below and above the threshold, exact integer results.
void run_every_collective(const Groups& g, int n, int r) {
  for (size_t count : {size_t{3}, size_t{16}, size_t{1000}, size_t{70001}}) {
    std::vector<int32_t> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = static_cast<int32_t>(i % 1000) + r;
    g[r]->allreduce(x.data(), count, DType::kInt32, ReduceOp::kSum, false);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(x[i], n * static_cast<int32_t>(i % 1000) + n * (n - 1) / 2) << count;

    std::vector<int32_t> b(count, r == 1 ? 7 : -1);
    g[r]->broadcast(b.data(), count, DType::kInt32, 1, false);
    for (auto v : b) ASSERT_EQ(v, 7);

    std::vector<int32_t> acc(count, r + 1);
    g[r]->reduce(acc.data(), count, DType::kInt32, ReduceOp::kSum, 0, false);
    for (auto v : acc) ASSERT_EQ(v, r == 0 ? n * (n + 1) / 2 : r + 1);  // leaves send theirs

    std::vector<int32_t> mine(count, r);
    std::vector<std::vector<int32_t>> outs(n, std::vector<int32_t>(count, -1));
    std::vector<void*> ptrs;
    for (auto& o : outs) ptrs.push_back(o.data());
    g[r]->allgather(mine.data(), count, DType::kInt32, ptrs, false);
    for (int p = 0; p < n; ++p)
      for (auto v : outs[p]) ASSERT_EQ(v, p);

    std::vector<std::vector<int32_t>> blocks(n, std::vector<int32_t>(count));
    std::vector<const void*> in_ptrs;
    for (int k = 0; k < n; ++k) {
      std::fill(blocks[k].begin(), blocks[k].end(), k * 100 + r);
      in_ptrs.push_back(blocks[k].data());
    }
    std::vector<int32_t> red(count);
    g[r]->reduce_scatter(in_ptrs, red.data(), count, DType::kInt32, ReduceOp::kSum, false);
    for (auto v : red) ASSERT_EQ(v, r * 100 * n + n * (n - 1) / 2);

    std::vector<size_t> counts(n, count);
    for (auto& o : outs) std::fill(o.begin(), o.end(), -1);
    g[r]->all_to_all(in_ptrs, counts, ptrs, counts, DType::kInt32, false);
    for (int p = 0; p < n; ++p)
      for (auto v : outs[p]) ASSERT_EQ(v, r * 100 + p);
  }
  g[r]->barrier(false);
}

class SingleCopyTest : public ::testing::TestWithParam<int> {};

TEST_P(SingleCopyTest, EveryCollectiveIsExactOverAddresses) {
  const int n = GetParam();
  auto s = connected(n, small_rings(64));
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p) EXPECT_EQ(s[r]->single_copy_from(p), p != r);
  for (size_t small : {size_t{0}, size_t{1} << 30}) {  // ring allreduce, recursive doubling
    Groups g = groups_over(s, small);
    in_threads(n, [&](int r) { run_every_collective(g, n, r); });
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, SingleCopyTest, ::testing::Values(2, 3, 4));

TEST(SingleCopy, TurnedOffUsesTheRings) {
  auto s = connected(2, small_rings(0));
  EXPECT_FALSE(s[0]->single_copy_from(1));
  EXPECT_FALSE(s[1]->single_copy_from(0));
  Groups g = groups_over(s, 0);
  in_threads(2, [&](int r) { run_every_collective(g, 2, r); });
}

// Reductions and moves have their own thresholds: either one alone is exact.
TEST(SingleCopy, MovedAndReducedThresholdsApplyApart) {
  for (SingleCopyBytes t : {SingleCopyBytes{64, 0}, SingleCopyBytes{0, 64}}) {
    ShmOptions so = small_rings(0);
    so.single_copy = t;
    auto s = connected(3, so);
    Groups g = groups_over(s, 0);
    in_threads(3, [&](int r) { run_every_collective(g, 3, r); });
  }
}

// What the receiver does decides, per payload: an all_reduce's first half is folded in and keeps
// the ring here, its second half is copied as it is and goes by address, as an all_gather's does.
TEST(SingleCopy, FoldedPayloadsAndMovedOnesChooseApart) {
  ShmOptions so = megabyte_rings();
  so.single_copy = {64, 0};  // moved payloads by address, folded ones through the ring
  const int n = 4;
  auto s = connected(n, so);
  GroupOptions o = group_options();
  o.allreduce_algorithm = AllreduceAlgorithm::kRing;
  o.allgather_algorithm = AllgatherAlgorithm::kRing;
  o.reduce_scatter_algorithm = ReduceScatterAlgorithm::kRing;
  Groups g;
  for (auto& t : s) g.push_back(std::make_shared<ProcessGroup>(t, o));
  const size_t count = 1000;
  auto acks_to_the_right = [&](int r) {
    return s[r]->channel((r + 1) % n, kCollectiveLane).acknowledged();
  };
  in_threads(n, [&](int r) {
    std::vector<int32_t> x(count * n, r);
    g[r]->allreduce(x.data(), x.size(), DType::kInt32, ReduceOp::kSum, false);
    for (auto v : x) ASSERT_EQ(v, n * (n - 1) / 2);
    EXPECT_EQ(acks_to_the_right(r), uint64_t(n - 1)) << "only the second half by address";
    std::vector<std::vector<int32_t>> blocks(n, std::vector<int32_t>(count, r));
    std::vector<const void*> in_ptrs;
    for (auto& b : blocks) in_ptrs.push_back(b.data());
    std::vector<int32_t> red(count);
    g[r]->reduce_scatter(in_ptrs, red.data(), count, DType::kInt32, ReduceOp::kSum, false);
    for (auto v : red) ASSERT_EQ(v, n * (n - 1) / 2);
    EXPECT_EQ(acks_to_the_right(r), uint64_t(n - 1)) << "reduce_scatter folds every payload";
    std::vector<std::vector<int32_t>> outs(n, std::vector<int32_t>(count, -1));
    std::vector<void*> ptrs;
    for (auto& out : outs) ptrs.push_back(out.data());
    g[r]->allgather(red.data(), count, DType::kInt32, ptrs, false);
    EXPECT_EQ(acks_to_the_right(r), uint64_t(2 * (n - 1))) << "all_gather moves every payload";
  });
}

// By default a reduced payload travels as an address only once it no longer fits the ring (the
// sender then writes it all and goes on); a moved one once it fills the ring while the ranks fit
// on the cores, from 256 KB while they take turns (an all_reduce's from 512 KB while fewer than 8
// do), but for one sent one way, which keeps the ring it fits, and a gather's, which keeps the
// ring while fewer than 8 ranks take turns but from 8 MB where two share each core. Set sizes
// stay as they are.
TEST(SingleCopy, DefaultsFollowTheRingAndTheCores) {
  const Crowding kFit, kFewTakeTurns{false, false, false}, kTwoPerCore{false, true, false},
      kMany{false, true, true};
  const SingleCopyBytes defaults;
  const SingleCopyBytes fit = defaults.resolved(4096, kFit);
  EXPECT_EQ(fit.moved, 4096u);
  EXPECT_EQ(fit.moved_in_all_reduce, 4096u);
  EXPECT_EQ(fit.one_way, 4096u);
  EXPECT_EQ(fit.fan_in, 4096u);
  EXPECT_EQ(fit.reduced, 4097u);
  EXPECT_EQ(fit.reduced_in_all_reduce, 4097u);
  // A reduce's one-way payloads keep the ring at every size while its copies run fast.
  EXPECT_EQ(fit.reduced_one_way, SingleCopyBytes::kDefault);
  EXPECT_TRUE(fit.gauged(64 << 20, Payload::kReducedOneWay));
  EXPECT_TRUE(fit.gauged(32 << 10, Payload::kReducedOneWay));
  EXPECT_FALSE(fit.gauged((32 << 10) - 1, Payload::kReducedOneWay));
  EXPECT_FALSE(fit.gauged(4096 - 1, Payload::kReduced));
  EXPECT_FALSE(fit.gauged(4096 - 1, Payload::kReducedInAllReduce));
  // Payloads between 32 KB and the ring: moved ones and a reduce's one-way ones ask the gauge,
  // the other reduced ones keep the ring.
  const SingleCopyBytes fit_mb = defaults.resolved(1 << 20, kFit);
  EXPECT_TRUE(fit_mb.gauged(64 << 10, Payload::kMoved));
  EXPECT_TRUE(fit_mb.gauged(64 << 10, Payload::kReducedOneWay));
  EXPECT_FALSE(fit_mb.gauged(64 << 10, Payload::kReduced));
  EXPECT_FALSE(fit_mb.gauged(64 << 10, Payload::kReducedInAllReduce));
  const SingleCopyBytes turns = defaults.resolved(1 << 20, kFewTakeTurns);
  EXPECT_EQ(turns.moved, uint64_t{256 << 10});
  EXPECT_EQ(turns.moved_in_all_reduce, uint64_t{512 << 10});
  EXPECT_EQ(turns.one_way, uint64_t{1 << 20});
  EXPECT_EQ(turns.fan_in, 0u);  // a gather's senders keep the ring
  // Two ranks to a core: a gather's blocks from 8 MB, at any ring.
  EXPECT_EQ(defaults.resolved(1 << 20, kTwoPerCore).fan_in, uint64_t{8 << 20});
  EXPECT_EQ(defaults.resolved(4096, kTwoPerCore).fan_in, uint64_t{8 << 20});
  EXPECT_EQ(turns.reduced, uint64_t{(1 << 20) + 1});
  EXPECT_EQ(turns.reduced_in_all_reduce, turns.reduced);
  EXPECT_EQ(turns.reduced_one_way, turns.reduced);
  EXPECT_FALSE(turns.gauged(64 << 10, Payload::kReducedOneWay));
  const SingleCopyBytes small_ring =
      defaults.resolved(4096, kFewTakeTurns);  // never beyond the ring
  EXPECT_EQ(small_ring.moved, 4096u);
  EXPECT_EQ(small_ring.moved_in_all_reduce, 4096u);
  // From 8 ranks taking turns, an all_reduce's payloads go from 256 KB (or beyond the ring).
  const SingleCopyBytes many = defaults.resolved(1 << 20, kMany);
  EXPECT_EQ(many.moved_in_all_reduce, uint64_t{256 << 10});
  EXPECT_EQ(many.fan_in, uint64_t{1 << 20});
  EXPECT_EQ(many.reduced_in_all_reduce, uint64_t{256 << 10});
  EXPECT_EQ(many.reduced, uint64_t{(1 << 20) + 1});
  EXPECT_EQ(defaults.resolved(4096, kMany).reduced_in_all_reduce, 4097u);
  const SingleCopyBytes set_many = SingleCopyBytes{100, 0}.resolved(1 << 20, kMany);
  EXPECT_EQ(set_many.reduced_in_all_reduce, 0u);
  EXPECT_EQ(set_many.moved_in_all_reduce, 100u);
  const SingleCopyBytes set_fit = SingleCopyBytes{100, 0}.resolved(4096, kFit);
  EXPECT_EQ(set_fit.reduced_one_way, 0u);  // a size set is kept: no gauge
  EXPECT_FALSE(set_fit.gauged(64 << 10, Payload::kReducedOneWay));
  const SingleCopyBytes set = SingleCopyBytes{100, 0}.resolved(4096, kTwoPerCore);
  EXPECT_EQ(set.moved, 100u);
  EXPECT_EQ(set.moved_in_all_reduce, 100u);
  EXPECT_EQ(set.one_way, 100u);
  EXPECT_EQ(set.fan_in, 100u);
  EXPECT_EQ(set.reduced, 0u);
}

TEST(SingleCopy, ByDefaultPayloadsThatFitTheRingTakeIt) {
  for (int world : {2, 3}) {
    ShmOptions so = small_rings(0);
    so.single_copy = SingleCopyBytes{};
    auto s = connected(world, so);
    Channel& ch = s[0]->channel(1, kCollectiveLane);
    EXPECT_FALSE(ch.single_copy(4096, Payload::kReduced));
    EXPECT_TRUE(ch.single_copy(4097, Payload::kReduced));
    for (Payload p : {Payload::kMoved, Payload::kMovedInAllReduce, Payload::kMovedOneWay}) {
      EXPECT_FALSE(ch.single_copy(4095, p)) << world;  // the ring is smaller than 256 KB
      EXPECT_TRUE(ch.single_copy(4096, p)) << world;
    }
    // The transport says the same by size, for the algorithms every rank chooses alike.
    for (size_t nbytes : {size_t{4095}, size_t{4096}, size_t{4097}})
      for (Payload p : {Payload::kMoved, Payload::kMovedInAllReduce, Payload::kMovedOneWay,
                        Payload::kMovedFanIn, Payload::kReduced, Payload::kReducedInAllReduce,
                        Payload::kReducedOneWay})
        EXPECT_EQ(s[0]->sends_by_address(nbytes, p), ch.single_copy(nbytes, p)) << nbytes;
    Groups g = groups_over(s, 0);
    in_threads(world, [&](int r) { run_every_collective(g, world, r); });
  }
}

// While writes into a peer's ring are slow, moved payloads from 32 KB that fit the ring go by
// address instead (but for probes), and so do a reduce's one-way payloads of any size from
// 32 KB; other reduced ones and smaller ones keep the ring. Exact either way.
TEST(SingleCopy, SlowRingWritesSendMovedPayloadsAsAddresses) {
  if (!ranks_fit_cores(2)) GTEST_SKIP() << "needs two cores";
  ShmOptions so;
  so.ring_bytes = 1 << 20;
  so.p2p_ring_bytes = 4096;
  auto s = connected(2, so);
  std::vector<ShmChannel*> channels;
  for (int r = 0; r < 2; ++r)
    channels.push_back(dynamic_cast<ShmChannel*>(&s[r]->channel(1 - r, kCollectiveLane)));
  ShmChannel& ch = *channels[0];
  EXPECT_FALSE(ch.single_copy(64 << 10, Payload::kMoved));
  EXPECT_FALSE(ch.single_copy(64 << 20, Payload::kReducedOneWay));
  for (auto* c : channels)
    for (int i = 0; i < 20; ++i) c->ring_gauge().record(512 << 10, 150000);
  int addresses = 0;
  for (int i = 0; i < 32; ++i) addresses += ch.single_copy(64 << 10, Payload::kMoved);
  EXPECT_EQ(addresses, 30);  // two probes take the ring
  EXPECT_FALSE(ch.single_copy((32 << 10) - 1, Payload::kMoved));
  EXPECT_FALSE(ch.single_copy(64 << 10, Payload::kReduced));
  EXPECT_FALSE(ch.single_copy(64 << 10, Payload::kReducedInAllReduce));
  addresses = 0;
  for (int i = 0; i < 32; ++i) addresses += ch.single_copy(64 << 20, Payload::kReducedOneWay);
  EXPECT_EQ(addresses, 30);
  EXPECT_FALSE(ch.single_copy((32 << 10) - 1, Payload::kReducedOneWay));
  EXPECT_TRUE(ch.single_copy(1 << 20, Payload::kMoved));
  Groups g = groups_over(s, 0);
  in_threads(2, [&](int r) { run_every_collective(g, 2, r); });
  for (auto* c : channels)
    for (int i = 0; i < 100; ++i) c->ring_gauge().record(512 << 10, 12000);
  EXPECT_FALSE(ch.single_copy(64 << 10, Payload::kMoved));
  EXPECT_FALSE(ch.single_copy(64 << 20, Payload::kReducedOneWay));
}

// A local copy larger than stream_copy_bytes() streams around the caches, exactly, beside a
// transfer.
// Every rank reads the root's buffer at once, by address or through lapping rings, from every root.
TEST(SingleCopy, BroadcastFromTheRootIsExact) {
  for (uint64_t single_copy : {uint64_t{64}, uint64_t{0}}) {
    auto s = connected(4, small_rings(single_copy));
    in_threads(4, [&](int r) {
      LazyDeadline deadline(20000);
      Comm c{*s[r], OpContext{}};
      c.ctx.kind = OpKind::kBroadcast;
      c.ctx.dtype = DType::kInt32;
      c.ctx.deadline = &deadline;
      for (int root = 0; root < 4; ++root)
        for (size_t count : {size_t{1}, size_t{1000}, size_t{70001}}) {
          std::vector<int32_t> x(count, -1);
          if (r == root)
            for (size_t i = 0; i < count; ++i) x[i] = static_cast<int32_t>(i) * 4 + root;
          ++c.ctx.seq;
          broadcast_from_root(c, x.data(), count * sizeof(int32_t), root);
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(x[i], static_cast<int32_t>(i) * 4 + root) << root << " " << count;
        }
    });
  }
}

// A scatter's root sends to 3 peers or more: by default its payloads go by address from 256 KB
// while the ranks take turns on the cores (the receivers share the copies); with 2 peers they keep
// the ring they fit, as while the ranks fit on the cores.
TEST(SingleCopy, ScatterRootsFanOutByAddressWhileRanksTakeTurns) {
  for (int world : {3, 4}) {
    auto s = connected(world, megabyte_rings());
    Groups g = groups_over(s, 0);
    const size_t count = (256 << 10) / sizeof(int32_t);
    in_threads(world, [&](int r) {
      std::vector<std::vector<int32_t>> blocks(world);
      std::vector<const void*> inputs;
      for (int k = 0; k < world; ++k) {
        blocks[k].assign(count, k);
        inputs.push_back(blocks[k].data());
      }
      std::vector<int32_t> out(count, -1);
      g[r]->scatter(inputs, out.data(), count, DType::kInt32, 0, false);
      for (auto v : out) ASSERT_EQ(v, r);
    });
    const uint64_t by_address = world >= 4 && !ranks_fit_cores(world) ? 1 : 0;
    for (int p = 1; p < world; ++p)
      EXPECT_EQ(s[0]->channel(p, kCollectiveLane).acknowledged(), by_address) << world;
  }
}

// Gathers `block_bytes` from each rank to rank 0 and returns whether each sender's block went
// by address (its ring was acknowledged).
std::vector<bool> gathered_by_address(int world, size_t block_bytes, const ShmOptions& options) {
  auto s = connected(world, options);
  Groups g = groups_over(s, 0);
  const size_t count = block_bytes / sizeof(int32_t);
  in_threads(world, [&](int r) {
    std::vector<int32_t> mine(count, r);
    std::vector<std::vector<int32_t>> outs(r == 0 ? world : 0, std::vector<int32_t>(count, -1));
    std::vector<void*> ptrs;
    for (auto& o : outs) ptrs.push_back(o.data());
    g[r]->gather(mine.data(), count, DType::kInt32, ptrs, 0, false);
    for (int p = 0; p < static_cast<int>(outs.size()); ++p)
      for (auto v : outs[p]) ASSERT_EQ(v, p);
  });
  std::vector<bool> by_address;
  for (int p = 1; p < world; ++p)
    by_address.push_back(s[p]->channel(0, kCollectiveLane).acknowledged() == 1);
  return by_address;
}

// A gather's senders keep the ring while fewer than 8 ranks take turns on the cores (the root's
// copies alone would serve them all), but for blocks from 8 MB where two ranks share each core;
// otherwise payloads beyond the ring go by address.
TEST(SingleCopy, GatherSendersKeepTheRingWhileFewRanksTakeTurns) {
  for (int world : {3, 4, 8}) {
    const Crowding cores = crowding(world);
    const bool ring = !cores.fit && !cores.many_take_turns;
    EXPECT_EQ(gathered_by_address(world, 2 << 20, megabyte_rings()),
              std::vector<bool>(world - 1, !ring))
        << world;
    if (world == 8) continue;
    EXPECT_EQ(gathered_by_address(world, 8 << 20, megabyte_rings()),
              std::vector<bool>(world - 1, !ring || cores.two_per_core))
        << world;
  }
}

// A reduce's leaf sends a payload beyond the ring through it while its copies into the ring run
// fast (the copy runs beside the root's fold), and by address while they are slow.
TEST(SingleCopy, ReduceLeavesFollowTheRingGauge) {
  if (!ranks_fit_cores(2)) GTEST_SKIP() << "needs two cores";
  auto s = connected(2, megabyte_rings());
  Groups g = groups_over(s, 0);
  const size_t count = (2 << 20) / sizeof(int32_t);
  auto reduce = [&] {
    in_threads(2, [&](int r) {
      std::vector<int32_t> x(count, r + 1);
      g[r]->reduce(x.data(), count, DType::kInt32, ReduceOp::kSum, 0, false);
      if (r == 0)
        for (auto v : x) ASSERT_EQ(v, 3);
    });
  };
  Channel& leaf = s[1]->channel(0, kCollectiveLane);
  auto slow = [&] {
    for (int i = 0; i < 20; ++i)
      dynamic_cast<ShmChannel&>(leaf).ring_gauge().record(512 << 10, 150000);
  };
  reduce();
  EXPECT_EQ(leaf.acknowledged(), 0u);  // through the ring
  slow();
  reduce();  // a probe, through the ring
  EXPECT_EQ(leaf.acknowledged(), 0u);
  slow();
  reduce();
  EXPECT_EQ(leaf.acknowledged(), 1u);  // by address
}

// While they take turns, broadcasts go from the root from the size sent one way by address (the
// ring's), and from 8 ranks from the fanned-out payloads' 256 KB.
TEST(SingleCopy, BroadcastsGoFromTheRootByAddressWhileRanksTakeTurns) {
  using B = BroadcastAlgorithm;
  ShmOptions so;
  so.ring_bytes = 512 << 10;
  so.p2p_ring_bytes = 4096;
  for (int world : {4, 8}) {
    auto s = connected(world, so);
    const ProcessGroup g(s[0], GroupOptions{});
    const bool turns = !ranks_fit_cores(world);
    EXPECT_EQ(g.broadcast_algorithm((256 << 10) - 4), B::kBinomial);
    EXPECT_EQ(g.broadcast_algorithm(256 << 10), turns && world >= 8 ? B::kFromRoot : B::kBinomial);
    EXPECT_EQ(g.broadcast_algorithm(512 << 10), turns ? B::kFromRoot : B::kScatterAllgather);
  }
}

TEST(SingleCopy, LargeLocalCopiesAreExact) {
  auto s = connected(2, small_rings(64));
  const size_t n = stream_copy_bytes() + 36;  // neither end nor length a multiple of 64
  in_threads(2, [&](int r) {
    LazyDeadline deadline(20000);
    Exchange x(*s[r], allgather_context(&deadline));
    std::vector<char> source(n + 1), copied(n + 1, 0), sent(1000, static_cast<char>(r)), got(1000);
    for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<char>(i * 7 + r);
    x.send(1 - r, sent.data(), sent.size());
    x.copy(copied.data() + 1, source.data() + 1, n);
    x.recv(1 - r, got.data(), got.size());
    x.run();
    EXPECT_EQ(got, std::vector<char>(1000, static_cast<char>(1 - r)));
    EXPECT_EQ(copied[0], 0);
    EXPECT_TRUE(std::equal(copied.begin() + 1, copied.end(), source.begin() + 1));
  });
}

// An exchange's local copy runs after its sends went out, unless a send reads its destination
// (then before, so the peer gets the copied bytes) or a receive writes its source (then before,
// so the copy gets the bytes as they were).
TEST(SingleCopy, LocalCopyIntoASentBufferRunsBeforeTheSend) {
  for (uint64_t threshold : {uint64_t{64}, uint64_t{0}}) {
    auto s = connected(2, small_rings(threshold));
    const size_t n = 10000;  // laps the 4 KB ring when it travels through it
    in_threads(2, [&](int r) {
      LazyDeadline deadline(20000);
      Exchange x(*s[r], allgather_context(&deadline));
      std::vector<char> sent(n, 'a'), copied(n, 'b'), got(n, 0), source(n, 'c');
      std::vector<char> before_recv(n, 'd');
      x.send(1 - r, sent.data(), n);
      x.copy(sent.data(), source.data(), n);  // read by the send: copied first
      x.copy(copied.data(), source.data(), n);
      x.copy(before_recv.data(), got.data(), n);  // its source is received into: copied first
      x.recv(1 - r, got.data(), n);
      x.run();
      EXPECT_EQ(got, source) << threshold;
      EXPECT_EQ(copied, source) << threshold;
      EXPECT_EQ(before_recv, std::vector<char>(n, 0)) << threshold;
    });
  }
}

TEST(SharedMove, ChunksArePagesWholeUnder128KBThenTwoThenOnePer512KBUpToEight) {
  EXPECT_EQ(move_chunk_bytes(8), size_t{4096});
  EXPECT_EQ(move_chunk_bytes(100000), size_t{102400});  // whole, rounded up to pages
  EXPECT_EQ(move_chunk_bytes(200000), size_t{102400});  // halves, rounded up to pages
  EXPECT_EQ(move_chunk_bytes(1 << 20), size_t{512} << 10);
  EXPECT_EQ(move_chunk_bytes(3 << 20), size_t{512} << 10);
  EXPECT_EQ(move_chunk_bytes(64 << 20), size_t{8} << 20);
}

// Two threads claiming at once take every chunk exactly once; claims for another message take
// none, also once its chunks run out.
TEST(SharedMove, ClaimsTakeEveryChunkOnceAndOnlyOfTheirMessage) {
  for (size_t n : {size_t{8}, size_t{40000}, size_t{1} << 20, size_t{5} << 20, size_t{77} << 20}) {
    for (int round = 0; round < 50; ++round) {
      std::atomic<uint64_t> claims{move_claim(7, 0)};
      std::vector<std::vector<MoveChunk>> taken(2);
      in_threads(2, [&](int r) {
        EXPECT_FALSE(claim_move_chunk(claims, 6 + 2 * r, n, kSender)) << "another message's";
        while (auto c = claim_move_chunk(claims, 7, n, kSender)) taken[r].push_back(*c);
      });
      std::vector<MoveChunk> all = taken[0];
      all.insert(all.end(), taken[1].begin(), taken[1].end());
      std::sort(all.begin(), all.end(),
                [](const MoveChunk& a, const MoveChunk& b) { return a.offset < b.offset; });
      size_t next = 0;
      for (const auto& c : all) {
        ASSERT_EQ(c.offset, next) << n;
        ASSERT_GT(c.nbytes, 0u);
        next += c.nbytes;
      }
      ASSERT_EQ(next, n);
      EXPECT_FALSE(claim_move_chunk(claims, 7, n, kSender));
      EXPECT_FALSE(claim_move_chunk(claims, 8, n, Claimer{true, 0, false}));
    }
  }
}

// A receiver takes all the rest at once where the sender is not free to help, or took none of
// the chunks since its first; while the sender takes some, one at a time.
TEST(SharedMove, AReceiverLeftAloneTakesTheRestAtOnce) {
  const size_t n = 4 << 20, chunk = 512 << 10;  // eight chunks
  auto receiver = [](size_t claims, bool helper) { return Claimer{true, claims, helper}; };
  std::atomic<uint64_t> claims{move_claim(2, 0)};
  auto all = claim_move_chunk(claims, 2, n, receiver(0, false));
  ASSERT_TRUE(all);
  EXPECT_EQ(all->nbytes, n) << "no helper: one claim";

  claims = move_claim(3, 0);
  auto first = claim_move_chunk(claims, 3, n, receiver(0, true));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->nbytes, chunk);
  auto rest = claim_move_chunk(claims, 3, n, receiver(1, true));
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->offset, chunk);
  EXPECT_EQ(rest->nbytes, n - chunk) << "the helper took none: the rest";
  EXPECT_FALSE(claim_move_chunk(claims, 3, n, receiver(2, true)));

  claims = move_claim(4, 0);
  ASSERT_TRUE(claim_move_chunk(claims, 4, n, receiver(0, true)));
  auto helped = claim_move_chunk(claims, 4, n, kSender);
  ASSERT_TRUE(helped);
  EXPECT_EQ(helped->offset, chunk);
  auto next = claim_move_chunk(claims, 4, n, receiver(1, true));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->offset, 2 * chunk);
  EXPECT_EQ(next->nbytes, chunk) << "the sender helps: one chunk at a time";
}

// Over real channels, one step at a time: the sender alone can move a payload the receiver
// offered, and once the receiver has moved on, a late sender takes nothing of the next one.
TEST(SharedMove, TheSenderWritesWhatItClaimsAndNothingOfTheNextMessage) {
  auto s = connected(2, small_rings(64));
  Channel& send = s[0]->channel(1, kCollectiveLane);
  Channel& recv = s[1]->channel(0, kCollectiveLane);
  const size_t n = 3 << 20;  // six chunks
  std::vector<char> src(n), dst(n, 0), next_dst(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<char>(i * 7 + 1);
  const uint64_t address = reinterpret_cast<uint64_t>(src.data());

  const uint64_t ticket = send.publish();
  EXPECT_FALSE(send.help_move(ticket, src.data(), n)) << "helped before the receiver offered";
  recv.begin_move(address, dst.data(), n);
  int helped = 0;
  while (send.help_move(ticket, src.data(), n)) ++helped;
  EXPECT_EQ(helped, 6);
  EXPECT_EQ(recv.move_some(), n);
  EXPECT_EQ(dst, src);
  recv.acknowledge();
  EXPECT_EQ(send.acknowledged(), ticket);

  EXPECT_EQ(send.publish(), ticket + 1);
  recv.begin_move(address, next_dst.data(), n);
  EXPECT_FALSE(send.help_move(ticket, src.data(), n)) << "a late sender took a chunk";
  size_t moved = 0;
  for (int step = 0; step < 100 && moved < n; ++step) moved = recv.move_some();
  EXPECT_EQ(moved, n);
  EXPECT_EQ(next_dst, src);
}

// Many broadcasts of changing sizes and values between two ranks, both copying: a chunk written
// late or twice would show in the next round's values.
TEST(SharedMove, RepeatedBroadcastsOfChangingSizesAreExact) {
  ShmOptions so = small_rings(64);
  so.ring_bytes = 1 << 16;
  auto s = connected(2, so);
  Groups g = groups_over(s, 0);
  in_threads(2, [&](int r) {
    std::vector<int32_t> x;
    for (int round = 0; round < 300; ++round) {
      const size_t count = (size_t{1} << (8 + round % 12)) + round;
      const int root = round % 2;
      x.assign(count, r == root ? round : -1);
      g[r]->broadcast(x.data(), count, DType::kInt32, root, false);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(x[i], round) << round << " " << i;
    }
  });
}

// A rank that yields beside a thread that never blocks, on one core, is kept off the core for a
// time slice at a time (on any scheduler): the exchange tells the gauge, which then finds yields
// slow, so the group sleeps at once rather than yield.
TEST(SlowYield, YieldsThatCostATimeSliceMakeTheGaugeSlow) {
  auto s = connected(2, small_rings(0));
  YieldGauge gauge;
  std::atomic<bool> stop{false};
  cpu_set_t first_core;
  CPU_ZERO(&first_core);
  CPU_SET(0, &first_core);
  std::thread busy([&] {
    ::pthread_setaffinity_np(::pthread_self(), sizeof first_core, &first_core);
    const Deadline give_up(5000);
    while (!stop.load(std::memory_order_relaxed) && !give_up.expired()) {
    }
  });
  in_threads(2, [&](int r) {
    OpContext ctx;
    ctx.kind = OpKind::kBroadcast;
    ctx.dtype = DType::kInt32;
    LazyDeadline deadline(20000);
    ctx.deadline = &deadline;
    ctx.yield_us = 10000000;  // yield all along
    ctx.yield_gauge = &gauge;
    Exchange x(*s[r], ctx);
    int32_t v = r == 1 ? 7 : 0;
    if (r == 0) {
      ::pthread_setaffinity_np(::pthread_self(), sizeof first_core, &first_core);
      x.recv(1, &v, sizeof v);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // yields a few slices
      x.send(0, &v, sizeof v);
    }
    x.run();
    EXPECT_EQ(v, 7);
  });
  stop = true;
  busy.join();
  EXPECT_TRUE(gauge.slow());
}

// Two processes: this one is rank 0, a forked child rank 1; pipes carry segment names.
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe(fd), 0); }
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  void put(const std::string& s) const {
    uint32_t len = static_cast<uint32_t>(s.size());
    EXPECT_EQ(::write(fd[1], &len, 4), 4);
    EXPECT_EQ(::write(fd[1], s.data(), len), static_cast<ssize_t>(len));
  }
  std::string get() const {
    uint32_t len = 0;
    if (::read(fd[0], &len, 4) != 4) return "";
    std::string s(len, '\0');
    size_t got = 0;
    while (got < len) {
      ssize_t k = ::read(fd[0], s.data() + got, len - got);
      if (k <= 0) return "";
      got += static_cast<size_t>(k);
    }
    return s;
  }
};

// Creates this process's rank, swaps segment names and tokens with the other and connects.
std::shared_ptr<ShmTransport> connect_pair(int rank, const Pipe& out, const Pipe& in) {
  auto t = std::make_shared<ShmTransport>(rank, 2, ShmOptions{});
  out.put(t->segment_name() + "|" + std::to_string(t->token()));
  std::string other = in.get();
  size_t bar = other.find('|');
  if (bar == std::string::npos) throw std::runtime_error("the other process sent no segment");
  std::vector<std::string> names(2);
  std::vector<uint64_t> tokens(2);
  names[rank] = t->segment_name();
  tokens[rank] = t->token();
  names[1 - rank] = other.substr(0, bar);
  tokens[1 - rank] = std::stoull(other.substr(bar + 1));
  t->connect(names, tokens);
  out.put("mapped");  // the other may unlink its name only once this rank has mapped it
  if (in.get() != "mapped") throw std::runtime_error("the other process did not connect");
  t->unlink();
  return t;
}

// Makes a system call (process_vm_readv or _writev) fail with EPERM in this process, as a
// container's seccomp profile can.
void forbid(unsigned syscall_nr) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, syscall_nr, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
    ::_exit(3);
}

int wait_child(pid_t pid) {
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

constexpr size_t kBig =
    1 << 20;  // floats: 4 MB, above the 1 MB default threshold, also when halved

// Forks rank 1 with one system call refused: it connects, runs `child` on its group and exits
// with what that returns (6 on an exception). Returns its pid.
pid_t fork_refusing(unsigned syscall_nr, const Pipe& to_child, const Pipe& to_parent,
                    const std::function<int(ShmTransport&, ProcessGroup&)>& child) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  forbid(syscall_nr);
  int code = 1;
  try {
    auto t = connect_pair(1, to_parent, to_child);
    ProcessGroup g(t, group_options());
    code = child(*t, g);
  } catch (...) {
    code = 6;
  }
  ::_exit(code);
}

// The child's probe is refused: it receives through the rings while its own large sends still
// travel as addresses that the parent reads; both get exact results.
TEST(SingleCopyProcesses, RefusedProbeFallsBackToTheRings) {
  Pipe to_child, to_parent;
  pid_t pid = fork_refusing(
      SYS_process_vm_readv, to_child, to_parent, [](ShmTransport& t, ProcessGroup& g) {
        std::vector<float> x(kBig, 2.0f);
        g.allreduce(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, false);
        bool exact = true;
        for (float v : x) exact &= v == 3.0f;
        return t.single_copy_from(0) ? 4 : exact ? 0 : 5;
      });
  ASSERT_GE(pid, 0);
  auto t = connect_pair(0, to_child, to_parent);
  EXPECT_TRUE(t->single_copy_from(1));
  ProcessGroup g(t, group_options());
  std::vector<float> x(kBig, 1.0f);
  g.allreduce(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, false);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], 3.0f) << i;
  EXPECT_EQ(wait_child(pid), 0);
}

// Broadcasts from either rank in turn; a sender that wrote where it may not would fail within
// these.
bool broadcasts_are_exact(ProcessGroup& g) {
  std::vector<float> x(kBig);
  for (int round = 0; round < 16; ++round) {
    const int root = round % 2;
    std::fill(x.begin(), x.end(), g.rank() == root ? 1.0f + root : 0.0f);
    g.broadcast(x.data(), x.size(), DType::kFloat32, root, false);
    for (float v : x)
      if (v != 1.0f + root) return false;
  }
  return true;
}

// The child may read the parent's memory but not write it: it reads the parent's payloads with
// the parent's help, and the parent reads the child's payloads alone.
TEST(SingleCopyProcesses, RefusedWriteLeavesTheReceiverEveryChunk) {
  Pipe to_child, to_parent;
  pid_t pid = fork_refusing(SYS_process_vm_writev, to_child, to_parent,
                            [](ShmTransport& t, ProcessGroup& g) {
                              return !t.single_copy_from(0) ? 4 : broadcasts_are_exact(g) ? 0 : 5;
                            });
  ASSERT_GE(pid, 0);
  auto t = connect_pair(0, to_child, to_parent);
  EXPECT_TRUE(t->single_copy_from(1));
  ProcessGroup g(t, group_options());
  EXPECT_TRUE(broadcasts_are_exact(g));
  EXPECT_EQ(wait_child(pid), 0);
}

// The header `peer` has put in this rank's collective ring, once there (unread), or what the
// ring holds after 20 s.
MessageHeader header_in_ring(ShmTransport& t, int peer) {
  Channel& ch = t.channel(peer, kCollectiveLane);
  MessageHeader h{};
  const Deadline give_up(20000);
  while (ch.peek(&h, sizeof h) < sizeof h && !give_up.expired()) std::this_thread::yield();
  return h;
}

// The child publishes its buffer's address, then dies before the parent reads it.
TEST(SingleCopyProcesses, SenderThatDiesMidTransferIsANetworkErrorNamingIt) {
  Pipe to_child, to_parent;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      auto t = connect_pair(1, to_parent, to_child);
      ProcessGroup g(t, group_options());
      std::vector<float> x(kBig, 5.0f);
      auto work = g.broadcast(x.data(), x.size(), DType::kFloat32, 1, true);
      to_child.get();  // the parent has seen the address: die holding the buffer
      ::_exit(0);
    } catch (...) {
    }
    ::_exit(0);
  }
  auto t = connect_pair(0, to_child, to_parent);
  ProcessGroup g(t, group_options());
  const MessageHeader h = header_in_ring(*t, 1);  // with the address, unread
  ASSERT_EQ(h.flags, kSingleCopyFlag);
  to_child.put("die");
  EXPECT_EQ(wait_child(pid), 0);
  std::vector<float> x(kBig, 0.0f);
  try {
    g.broadcast(x.data(), x.size(), DType::kFloat32, 1, false);
    FAIL() << "expected a NetworkError";
  } catch (const NetworkError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("broadcast"), std::string::npos) << e.what();
  }
}

// The parent publishes its buffer's address; the child sees it and then, unread, either dies or
// aborts the group. The parent, waiting for the acknowledgement, gets a NetworkError naming it.
void receiver_leaves(bool abort, const std::string& expected) {
  Pipe to_child, to_parent;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      auto t = connect_pair(1, to_parent, to_child);
      header_in_ring(*t, 0);
      if (abort) {
        t->abort("stopping");
        to_child.get();  // stay alive until the parent has seen the abort
      }
    } catch (...) {
    }
    ::_exit(0);
  }
  auto t = connect_pair(0, to_child, to_parent);
  ProcessGroup g(t, group_options());
  std::vector<float> x(kBig, 1.0f);
  try {
    g.broadcast(x.data(), x.size(), DType::kFloat32, 0, false);
    FAIL() << "expected a NetworkError";
  } catch (const NetworkError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 -> rank 1: broadcast"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  to_child.put("done");
  EXPECT_EQ(wait_child(pid), 0);
}

TEST(SingleCopyProcesses, ReceiverThatDiesBeforeReadingIsANetworkErrorNamingIt) {
  receiver_leaves(false, "died");
}

TEST(SingleCopyProcesses, ReceiverThatAbortsBeforeReadingIsANetworkErrorNamingIt) {
  receiver_leaves(true, "rank 1 left the group: stopping");
}

}  // namespace
}  // namespace pscore
