// Collectives with ranks as threads over real TCP and shared-memory transports: every algorithm,
// world sizes {1,2,3,4,6,7,8}, element counts from 0 up, each allreduce algorithm forced. TCP ranks
// of odd worlds sleep in epoll, those of even worlds in poll().
#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/process_group.h"
#include "common/cores.h"
#include "common/error.h"
#include "in_threads.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
namespace pscore {
namespace {

using Groups = std::vector<std::shared_ptr<ProcessGroup>>;

Groups make_groups(int n, bool shm, GroupOptions opts) {
  std::vector<std::shared_ptr<Transport>> ts(n);
  Groups groups(n);
  if (shm) {
    std::vector<std::shared_ptr<ShmTransport>> s(n);
    std::vector<std::string> names(n);
    std::vector<uint64_t> tokens(n);
    ShmOptions so;
    so.ring_bytes = 4096;  // tiny rings: every message laps them
    so.p2p_ring_bytes = 1024;
    so.single_copy.moved = 32 << 10;   // moves lap the rings below 32 KB
    so.single_copy.reduced = 1 << 20;  // reductions through the lapping rings too
    for (int r = 0; r < n; ++r) {
      s[r] = std::make_shared<ShmTransport>(r, n, so);
      names[r] = s[r]->segment_name();
      tokens[r] = s[r]->token();
    }
    in_threads(n, [&](int r) { s[r]->connect(names, tokens); });
    for (int r = 0; r < n; ++r) {
      s[r]->unlink();
      ts[r] = s[r];
    }
  } else {
    std::vector<std::shared_ptr<TcpTransport>> t(n);
    std::vector<int> ports(n);
    for (int r = 0; r < n; ++r) {
      TcpOptions to;
      to.epoll_min_fds = n % 2 ? 1 : 1 << 20;
      t[r] = std::make_shared<TcpTransport>(r, n, to);
      ports[r] = t[r]->port();
    }
    std::vector<std::string> hosts(n, "127.0.0.1");
    in_threads(n, [&](int r) { t[r]->connect(hosts, ports, 10000); });
    for (int r = 0; r < n; ++r) ts[r] = t[r];
  }
  for (int r = 0; r < n; ++r) groups[r] = std::make_shared<ProcessGroup>(ts[r], opts);
  return groups;
}

struct Param {
  int world;
  bool shm;
  size_t small_bytes;                                        // where auto's recursive doubling ends
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;  // else: at every size
  // Allgather (and a large broadcast's) by recursive doubling and reduce_scatter by recursive
  // halving at every size (powers of two; others take the ring); false: auto.
  bool fewer_steps = false;
};

class CollectivesTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    GroupOptions o;
    o.timeout_ms = 20000;
    o.small_allreduce_bytes = GetParam().small_bytes;
    o.allreduce_algorithm = GetParam().algorithm;
    if (GetParam().fewer_steps) {
      o.allgather_algorithm = AllgatherAlgorithm::kRecursiveDoubling;
      o.reduce_scatter_algorithm = ReduceScatterAlgorithm::kRecursiveHalving;
    }
    o.large_broadcast_bytes = 64;
    groups_ = make_groups(GetParam().world, GetParam().shm, o);
  }
  int n() const { return GetParam().world; }
  Groups groups_;
};

const std::vector<size_t> kCounts = {0, 1, 5, 13, 1000, 10007};

TEST_P(CollectivesTest, AllreduceSumMaxAvg) {
  in_threads(n(), [&](int r) {
    for (size_t count : kCounts) {
      std::vector<int64_t> a(count), b(count), c(count);
      for (size_t i = 0; i < count; ++i) a[i] = b[i] = c[i] = static_cast<int64_t>(i) * (r + 1);
      groups_[r]->allreduce(a.data(), count, DType::kInt64, ReduceOp::kSum, false);
      groups_[r]->allreduce(b.data(), count, DType::kInt64, ReduceOp::kMax, false);
      groups_[r]->allreduce(c.data(), count, DType::kInt64, ReduceOp::kAvg, false);
      int64_t tri = n() * (n() + 1) / 2;
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(a[i], static_cast<int64_t>(i) * tri) << "count " << count;
        ASSERT_EQ(b[i], static_cast<int64_t>(i) * n());
        ASSERT_EQ(c[i], static_cast<int64_t>(i) * tri / n());
      }
    }
  });
}

TEST_P(CollectivesTest, FloatAllreduceIsBitwiseEqualAcrossRanks) {
  std::vector<std::vector<float>> out(n());
  in_threads(n(), [&](int r) {
    std::vector<float> x(10007);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f / static_cast<float>(i + r + 1);
    groups_[r]->allreduce(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, false);
    out[r] = x;
  });
  for (int r = 1; r < n(); ++r)
    EXPECT_EQ(0, std::memcmp(out[0].data(), out[r].data(), out[0].size() * 4));
}

TEST_P(CollectivesTest, BroadcastAndReduceFromEveryRoot) {
  in_threads(n(), [&](int r) {
    for (int root = 0; root < n(); ++root) {
      for (size_t count : kCounts) {
        std::vector<int32_t> x(count, r == root ? 42 : r);
        groups_[r]->broadcast(x.data(), count, DType::kInt32, root, false);
        for (auto v : x) ASSERT_EQ(v, 42);
        std::vector<int32_t> y(count, r + 1);
        groups_[r]->reduce(y.data(), count, DType::kInt32, ReduceOp::kSum, root, false);
        for (auto v : y) ASSERT_EQ(v, r == root ? n() * (n() + 1) / 2 : r + 1);
      }
    }
  });
}

TEST_P(CollectivesTest, GatherScatterFamilies) {
  in_threads(n(), [&](int r) {
    for (size_t count : {size_t{0}, size_t{3}, size_t{1001}}) {
      std::vector<int32_t> mine(count, r);
      std::vector<std::vector<int32_t>> outs(n(), std::vector<int32_t>(count, -1));
      std::vector<void*> ptrs;
      for (auto& o : outs) ptrs.push_back(o.data());
      groups_[r]->allgather(mine.data(), count, DType::kInt32, ptrs, false);
      for (int p = 0; p < n(); ++p)
        for (auto v : outs[p]) ASSERT_EQ(v, p);

      std::vector<std::vector<int32_t>> blocks(n(), std::vector<int32_t>(count));
      std::vector<const void*> in_ptrs;
      for (int b = 0; b < n(); ++b) {
        std::fill(blocks[b].begin(), blocks[b].end(), b * 100 + r);
        in_ptrs.push_back(blocks[b].data());
      }
      std::vector<int32_t> red(count);
      groups_[r]->reduce_scatter(in_ptrs, red.data(), count, DType::kInt32, ReduceOp::kSum, false);
      for (auto v : red) ASSERT_EQ(v, r * 100 * n() + n() * (n() - 1) / 2);

      int root = n() - 1;
      for (auto& o : outs) std::fill(o.begin(), o.end(), -1);
      groups_[r]->gather(mine.data(), count, DType::kInt32, r == root ? ptrs : std::vector<void*>{},
                         root, false);
      if (r == root)
        for (int p = 0; p < n(); ++p)
          for (auto v : outs[p]) ASSERT_EQ(v, p);
      std::vector<int32_t> got(count, -1);
      groups_[r]->scatter(r == root ? in_ptrs : std::vector<const void*>{}, got.data(), count,
                          DType::kInt32, root, false);
      for (auto v : got) ASSERT_EQ(v, r * 100 + root);

      std::vector<size_t> counts(n(), count);
      for (auto& o : outs) std::fill(o.begin(), o.end(), -1);
      groups_[r]->all_to_all(in_ptrs, counts, ptrs, counts, DType::kInt32, false);
      for (int p = 0; p < n(); ++p)
        for (auto v : outs[p]) ASSERT_EQ(v, r * 100 + p);
    }
    groups_[r]->barrier(false);
  });
}

// all_gather_into_tensor's shape: the outputs are one buffer in rank order (recursive doubling
// works in it), and the input may be the own block of it.
TEST_P(CollectivesTest, AllgatherIntoOneBufferAndInPlace) {
  in_threads(n(), [&](int r) {
    for (size_t count : {size_t{1}, size_t{1001}}) {
      std::vector<int32_t> whole(count * n(), -1);
      std::vector<void*> ptrs;
      for (int p = 0; p < n(); ++p) ptrs.push_back(whole.data() + p * count);
      std::vector<int32_t> mine(count, r);
      groups_[r]->allgather(mine.data(), count, DType::kInt32, ptrs, false);
      for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(whole[i], static_cast<int>(i / count));
      std::fill(whole.begin(), whole.end(), -1);
      std::fill(whole.begin() + r * count, whole.begin() + (r + 1) * count, r);
      groups_[r]->allgather(ptrs[r], count, DType::kInt32, ptrs, false);
      for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(whole[i], static_cast<int>(i / count));
    }
  });
}

// The ring accumulates the own block in the output and sends block r - 1 straight from the input:
// the inputs stay as they were, an output that is the own input block works in place, and an
// output on another block's memory still ends with the sum.
TEST_P(CollectivesTest, ReduceScatterKeepsInputsAndTakesAliasedOutputs) {
  const size_t count = 1001;
  in_threads(n(), [&](int r) {
    std::vector<int32_t> whole(count * n());
    auto block = [&](int b) { return whole.data() + static_cast<size_t>(b) * count; };
    auto fill = [&] {
      for (int b = 0; b < n(); ++b) std::fill(block(b), block(b) + count, b * 100 + r);
    };
    std::vector<const void*> in_ptrs;
    for (int b = 0; b < n(); ++b) in_ptrs.push_back(block(b));
    const int32_t want = r * 100 * n() + n() * (n() - 1) / 2;
    auto reduce_into = [&](int32_t* out) {
      groups_[r]->reduce_scatter(in_ptrs, out, count, DType::kInt32, ReduceOp::kSum, false);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], want);
    };
    fill();
    std::vector<int32_t> out(count);
    reduce_into(out.data());
    for (int b = 0; b < n(); ++b)
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(block(b)[i], b * 100 + r);
    reduce_into(block(r));
    fill();
    reduce_into(block((r - 1 + n()) % n()));
  });
}

TEST_P(CollectivesTest, SendRecvRing) {
  if (n() == 1) return;
  in_threads(n(), [&](int r) {
    std::vector<double> out(5000, r), in(5000, -1);
    auto s = groups_[r]->send(out.data(), out.size(), DType::kFloat64, (r + 1) % n(), 3, true);
    groups_[r]->recv(in.data(), in.size(), DType::kFloat64, (r + n() - 1) % n(), 3, false);
    s->wait();
    for (auto v : in) ASSERT_EQ(v, (r + n() - 1) % n());
  });
}

// Several threads of rank 0 send to rank 1 at once: every message arrives once (sequence numbers
// follow the order messages travel in, not the order threads reserved them).
TEST_P(CollectivesTest, ConcurrentSendersToOnePeer) {
  if (n() < 2) GTEST_SKIP() << "needs a peer";
  constexpr int kThreads = 4, kEach = 40;
  in_threads(n(), [&](int r) {
    if (r == 0) {
      std::vector<std::thread> senders;
      std::vector<std::exception_ptr> errors(kThreads);
      for (int t = 0; t < kThreads; ++t) {
        senders.emplace_back([&, t] {
          try {
            for (int64_t i = 0; i < kEach; ++i) {
              int64_t v = t * 1000 + i;
              groups_[0]->send(&v, 1, DType::kInt64, 1, 0, false);
            }
          } catch (...) {
            errors[t] = std::current_exception();
          }
        });
      }
      for (auto& s : senders) s.join();
      for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    } else if (r == 1) {
      std::vector<int64_t> got;
      for (int k = 0; k < kThreads * kEach; ++k) {
        int64_t v = -1;
        groups_[1]->recv(&v, 1, DType::kInt64, 0, 0, false);
        got.push_back(v);
      }
      std::sort(got.begin(), got.end());
      std::vector<int64_t> want;
      for (int t = 0; t < kThreads; ++t)
        for (int64_t i = 0; i < kEach; ++i) want.push_back(t * 1000 + i);
      ASSERT_EQ(got, want);
    }
  });
}

// Every other rank sends rank 0 three numbered messages, then one with tag 5; rank 0 takes the
// untagged ones from any source, then the tagged ones: senders keep their order, and a peer
// whose next message has another tag is passed over.
TEST_P(CollectivesTest, RecvFromAnySource) {
  if (n() < 2) GTEST_SKIP() << "needs a peer";
  in_threads(n(), [&](int r) {
    if (r > 0) {
      for (int64_t i = 0; i < 3; ++i) {
        std::vector<int64_t> m(4, 100 * r + i);
        groups_[r]->send(m.data(), m.size(), DType::kInt64, 0, 0, false);
      }
      int64_t last = -r;
      groups_[r]->send(&last, 1, DType::kInt64, 0, 5, false);
      return;
    }
    std::vector<int64_t> next(n(), 0);
    for (int k = 0; k < 3 * (n() - 1); ++k) {
      std::vector<int64_t> m(4, -1);
      auto w = groups_[0]->recv_any(m.data(), m.size(), DType::kInt64, 0, false);
      const int src = w->source();
      ASSERT_GT(src, 0);
      ASSERT_EQ(m[3], 100 * src + next[src]++);
    }
    for (int k = 1; k < n(); ++k) {
      int64_t last = 0;
      auto w = groups_[0]->recv_any(&last, 1, DType::kInt64, 5, true);
      w->wait();
      ASSERT_EQ(last, -w->source());
    }
  });
}

constexpr AllreduceAlgorithm kAuto = AllreduceAlgorithm::kAuto;
constexpr AllreduceAlgorithm kRecursiveDoubling = AllreduceAlgorithm::kRecursiveDoubling;
constexpr AllreduceAlgorithm kRing = AllreduceAlgorithm::kRing;
constexpr AllreduceAlgorithm kHalvingDoubling = AllreduceAlgorithm::kHalvingDoubling;

std::string algorithm_name(AllreduceAlgorithm a) {
  switch (a) {
    case kRecursiveDoubling:
      return "rd";
    case kRing:
      return "ring";
    case kHalvingDoubling:
      return "hd";
    default:
      return "auto";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, CollectivesTest,
    ::testing::Values(Param{1, false, 64}, Param{2, false, 64, kRing}, Param{3, false, 0, kRing},
                      Param{4, false, 0, kRecursiveDoubling, true}, Param{4, false, 0},
                      Param{7, false, 64, kRing}, Param{2, true, 0, kRing},
                      Param{3, true, 0, kRecursiveDoubling}, Param{4, true, 64, kRing},
                      Param{7, true, 64, kRing}, Param{3, true, 0, kHalvingDoubling},
                      Param{6, false, 0, kHalvingDoubling, true},
                      Param{8, true, 64, kHalvingDoubling, true}),
    [](const ::testing::TestParamInfo<Param>& p) {
      return std::string(p.param.shm ? "shm" : "tcp") + std::to_string(p.param.world) + "_" +
             std::to_string(p.param.small_bytes) + "_" + algorithm_name(p.param.algorithm) +
             (p.param.fewer_steps ? "_fewer" : "");
    });

TEST(CollectivesAlgorithms, AutoHalvesAndDoublesMidSizesOverTcpOnPowersOfTwo) {
  const auto taken = [](int n, bool shm, size_t nbytes, AllreduceAlgorithm asked = kAuto) {
    GroupOptions o;
    o.allreduce_algorithm = asked;
    return make_groups(n, shm, o)[0]->allreduce_algorithm(nbytes / 4, DType::kFloat32);
  };
  EXPECT_EQ(taken(4, false, 64 << 10), kRecursiveDoubling);
  EXPECT_EQ(taken(4, false, 1 << 20), kHalvingDoubling);
  EXPECT_EQ(taken(8, false, 1 << 20), kHalvingDoubling);
  EXPECT_EQ(taken(4, false, 2 << 20), kRing);  // the pairs' exchanges outgrow the socket buffers
  EXPECT_EQ(taken(2, false, 1 << 20), kRing);  // the same two steps either way
  EXPECT_EQ(taken(6, false, 1 << 20), kRing);  // the fold would move the buffer twice more
  EXPECT_EQ(taken(4, true, 1 << 20), kRing);   // shared-memory steps are cheap
  // but for 8 ranks or more taking turns on the cores, up to 1 MB too
  const auto turns8 = ranks_fit_cores(8) ? kRing : kHalvingDoubling;
  EXPECT_EQ(taken(8, true, 128 << 10), turns8);
  EXPECT_EQ(taken(8, true, 1 << 20), turns8);
  EXPECT_EQ(taken(8, true, 2 << 20), kRing);
  EXPECT_EQ(taken(6, true, 1 << 20), kRing);  // powers of two only
  // Asked for, an algorithm runs at every size; fewer elements than ranks take recursive doubling.
  EXPECT_EQ(taken(4, true, 64 << 20, kHalvingDoubling), kHalvingDoubling);
  EXPECT_EQ(taken(4, false, 16, kRing), kRing);
  EXPECT_EQ(taken(4, false, 12, kRing), kRecursiveDoubling);
}

TEST(CollectivesAlgorithms, AllgatherAndReduceScatterTakeFewerStepsWhereTheyPay) {
  using Taken = std::pair<AllgatherAlgorithm, ReduceScatterAlgorithm>;
  constexpr Taken kFewer{AllgatherAlgorithm::kRecursiveDoubling,
                         ReduceScatterAlgorithm::kRecursiveHalving};
  constexpr Taken kRings{AllgatherAlgorithm::kRing, ReduceScatterAlgorithm::kRing};
  const auto taken = [](int n, bool shm, size_t total_bytes, bool ask_fewer = false) {
    GroupOptions o;
    if (ask_fewer) {
      o.allgather_algorithm = AllgatherAlgorithm::kRecursiveDoubling;
      o.reduce_scatter_algorithm = ReduceScatterAlgorithm::kRecursiveHalving;
    }
    auto g = make_groups(n, shm, o)[0];
    const size_t count = total_bytes / 4 / n;  // per rank
    return Taken{g->allgather_algorithm(count, DType::kFloat32),
                 g->reduce_scatter_algorithm(count, DType::kFloat32)};
  };
  EXPECT_EQ(taken(4, true, 32 << 10), kFewer);  // small, on any transport
  EXPECT_EQ(taken(4, true, 64 << 10),
            Taken(AllgatherAlgorithm::kRing, ReduceScatterAlgorithm::kRecursiveHalving));
  EXPECT_EQ(taken(4, true, 256 << 10), kRings);
  // While the ranks take turns on the cores, all_gathers double from 4 MB in all.
  const auto turns =
      ranks_fit_cores(4) ? AllgatherAlgorithm::kRing : AllgatherAlgorithm::kRecursiveDoubling;
  EXPECT_EQ(taken(4, true, 4 << 20), Taken(turns, ReduceScatterAlgorithm::kRing));
  EXPECT_EQ(taken(4, false, 16 << 20), Taken(turns, ReduceScatterAlgorithm::kRing));
  EXPECT_EQ(taken(6, true, 16 << 20), kRings);
  // From 8 ranks, from 256 KB.
  const auto turns8 =
      ranks_fit_cores(8) ? AllgatherAlgorithm::kRing : AllgatherAlgorithm::kRecursiveDoubling;
  EXPECT_EQ(taken(8, true, (256 << 10) - 32), kRings);
  EXPECT_EQ(taken(8, true, 256 << 10), Taken(turns8, ReduceScatterAlgorithm::kRing));
  EXPECT_EQ(taken(4, false, 1 << 20), kFewer);  // costly steps, up to 1 MB in all
  EXPECT_EQ(taken(8, false, 1 << 20), kFewer);
  EXPECT_EQ(taken(4, false, 4 << 20), Taken(turns, ReduceScatterAlgorithm::kRing));
  EXPECT_EQ(taken(2, false, 4 << 10), kRings);  // one step either way
  EXPECT_EQ(taken(6, false, 4 << 10), kRings);  // powers of two only
  EXPECT_EQ(taken(6, false, 4 << 10, true), kRings);
  EXPECT_EQ(taken(4, true, 64 << 20, true), kFewer);  // asked for: at every size
}

// Large broadcasts scatter then allgather while the ranks fit on the cores. While they take turns
// the tree, which moves less in all, but for payloads sent by address (shared memory, from 32 KB
// in make_groups), which every rank reads out of the root's buffer at once. A set size scatters.
TEST(CollectivesAlgorithms, BroadcastsScatterWhereTheRanksFitTheCores) {
  using B = BroadcastAlgorithm;
  const bool fit = ranks_fit_cores(4);
  for (bool shm : {true, false}) {
    auto g = make_groups(4, shm, GroupOptions{})[0];
    EXPECT_EQ(g->broadcast_algorithm((32 << 10) - 1), B::kBinomial);
    const B by_address = shm ? B::kFromRoot : B::kBinomial;
    EXPECT_EQ(g->broadcast_algorithm(32 << 10), fit ? B::kBinomial : by_address);
    EXPECT_EQ(g->broadcast_algorithm(512 << 10), fit ? B::kScatterAllgather : by_address);
    EXPECT_EQ(g->broadcast_algorithm(size_t{1} << 30), fit ? B::kScatterAllgather : by_address);
  }
  GroupOptions o;
  o.large_broadcast_bytes = 1024;
  EXPECT_EQ(make_groups(4, true, o)[0]->broadcast_algorithm(1024), B::kScatterAllgather);
  EXPECT_EQ(make_groups(4, false, o)[0]->broadcast_algorithm(1 << 20), B::kScatterAllgather);
  // 3 ranks: the tree (the same as from the root) or, by address, from the root.
  EXPECT_NE(make_groups(3, true, o)[0]->broadcast_algorithm(1 << 20), B::kScatterAllgather);
  // What the group agreed on holds, whatever this host's cores.
  for (int fit : {0, 1}) {
    GroupOptions agreed;
    agreed.ranks_fit_cores = fit;
    auto g = make_groups(4, true, agreed)[0];
    EXPECT_EQ(g->ranks_fit_cores(), fit == 1);
    EXPECT_EQ(g->broadcast_algorithm(512 << 10), fit ? B::kScatterAllgather : B::kFromRoot);
    EXPECT_EQ(g->allgather_algorithm((4 << 20) / 16, DType::kFloat32),
              fit ? AllgatherAlgorithm::kRing : AllgatherAlgorithm::kRecursiveDoubling);
  }
}

TEST(CollectivesFailure, SilentPeerTimesOutWithNames) {
  GroupOptions o;
  o.timeout_ms = 300;
  auto g = make_groups(2, false, o);
  std::vector<float> x(10, 1.0f);
  try {
    g[0]->allreduce(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, false);
    FAIL() << "expected a timeout";
  } catch (const TimeoutError& e) {
    EXPECT_STREQ(
        e.what(),
        "rank 0 <- rank 1: allreduce #0 timed out after 300 ms waiting for 40 bytes (0 moved)");
  }
  // The group is broken from now on, and says so at once.
  EXPECT_THROW(g[0]->barrier(false), NetworkError);
}

// Runs call(rank, group) on two shared-memory ranks; the NetworkError each one raised, or "".
std::vector<std::string> network_errors(const std::function<void(int, ProcessGroup&)>& call) {
  GroupOptions o;
  o.timeout_ms = 5000;
  auto g = make_groups(2, true, o);
  std::vector<std::string> msgs(2);
  in_threads(2, [&](int r) {
    try {
      call(r, *g[r]);
    } catch (const NetworkError& e) {
      msgs[r] = e.what();
    }
  });
  return msgs;
}

TEST(CollectivesFailure, SizeMismatchIsDetected) {
  auto msgs = network_errors([](int r, ProcessGroup& g) {
    std::vector<float> x(r == 0 ? 8 : 9, 1.0f);
    g.allreduce(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, false);
  });
  EXPECT_NE(msgs[0].find("size mismatch: the peer sent 36 bytes, this rank expects 32"),
            std::string::npos)
      << msgs[0];
}

// Over shared memory a barrier's steps are signals, not messages: a rank awaiting a signal that
// finds the peer's message of another operation instead names that operation.
TEST(CollectivesFailure, AMessageWhereABarrierSignalIsAwaitedNamesThePeersOperation) {
  auto msgs = network_errors([](int r, ProcessGroup& g) {
    std::vector<float> x(8, 1.0f);
    if (r == 0)
      g.barrier(false);
    else
      g.allreduce(x.data(), x.size(), DType::kFloat32, ReduceOp::kSum, false);
  });
  EXPECT_NE(msgs[0].find("rank 0 <- rank 1: barrier #0: ranks disagree on the operation: the peer "
                         "sent allreduce #0"),
            std::string::npos)
      << msgs[0];
  EXPECT_NE(msgs[1].find("left the group"), std::string::npos) << msgs[1];
}

// Ranks that sleep at once (more ranks than cores) are woken by the signals: a lost wake-up
// would cost a 50 ms wait slice per barrier, 25 s for these.
TEST(CollectivesSignals, SleepingRanksAreWokenBySignals) {
  GroupOptions o;
  o.timeout_ms = 20000;
  o.spin_us = 0;
  o.yield_us = 0;
  auto g = make_groups(3, true, o);
  const Deadline within(10000);
  in_threads(3, [&](int r) {
    for (int i = 0; i < 500; ++i) g[r]->barrier(false);
  });
  EXPECT_FALSE(within.expired());
  EXPECT_EQ(g[0]->progress().entered, 500u);
}

int64_t thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// Over sockets a rank waiting on a large item sleeps instead of polling first (polled, the
// payload trickles in a few KB a system call). Rank 1 enters late; rank 0's thread burns about the
// delay in CPU time while it polls (at least half of it on a loaded machine), and little while it
// sleeps (the transfer's own copies: ~50 ms under TSan).
TEST(CollectivesWaiting, LargeItemsOverSocketsSleepWhileSmallOnesPoll) {
  GroupOptions o;
  o.timeout_ms = 20000;
  o.spin_us = 10000000;
  o.ranks_fit_cores = 1;
  auto g = make_groups(2, false, o);
  constexpr int64_t kLateUs = 1000000;
  auto cpu_waiting = [&](size_t nbytes) {
    std::vector<std::vector<uint8_t>> in(2), out(2 * 2);
    for (int r = 0; r < 2; ++r) in[r].assign(nbytes, static_cast<uint8_t>(r + 1));
    for (auto& buffer : out) buffer.resize(nbytes);
    int64_t cpu = 0;
    in_threads(2, [&](int r) {
      if (r == 1) std::this_thread::sleep_for(std::chrono::microseconds(kLateUs));
      const int64_t before = thread_cpu_us();
      g[r]->allgather(in[r].data(), nbytes, DType::kUInt8,
                      {out[2 * r].data(), out[2 * r + 1].data()}, false);
      if (r == 0) cpu = thread_cpu_us() - before;
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(out[2 * r][nbytes - 1], 1);
      EXPECT_EQ(out[2 * r + 1][nbytes - 1], 2);
    }
    return cpu;
  };
  EXPECT_GT(cpu_waiting(4096), kLateUs / 4);  // polled (the test can fail)
  EXPECT_LT(cpu_waiting(TcpTransport::kPolledItemLimit), kLateUs / 4);
  EXPECT_LT(cpu_waiting(TcpTransport::kPolledItemLimit + 1), kLateUs / 4);
}

// Over TCP a receiver reads ahead of its message whatever has arrived behind it (the next
// operations' messages, queued by a sender that runs ahead): each still reaches its own operation
// whole, moved or folded, next to messages larger than the read-ahead.
TEST(CollectivesTcp, AReceiverBehindItsSendersTakesEachQueuedMessageWhole) {
  constexpr int kWorld = 3;
  constexpr int kRounds = 40;
  const std::vector<size_t> sizes = {1, 4, 1000, 4096, 3 * 4096 + 4, 16384, 40000, 200000};
  GroupOptions o;
  o.timeout_ms = 20000;
  auto g = make_groups(kWorld, false, o);
  auto value = [](int round, size_t size_index, int rank, size_t i) {
    return static_cast<int32_t>(round * 7919 + size_index * 131 + rank * 17 + i % 1000);
  };
  in_threads(kWorld, [&](int r) {
    // The receivers start late, so the senders' messages queue in their sockets.
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int round = 0; round < kRounds; ++round) {
      for (size_t s = 0; s < sizes.size(); ++s) {
        const size_t n = sizes[s];
        std::vector<int32_t> mine(n), sum(n);
        for (size_t i = 0; i < n; ++i) mine[i] = value(round, s, r, i);
        std::vector<std::vector<int32_t>> gathered(kWorld, std::vector<int32_t>(n, -1));
        std::vector<void*> outs;
        for (auto& v : gathered) outs.push_back(v.data());
        g[r]->gather(mine.data(), n, DType::kInt32, r == 0 ? outs : std::vector<void*>{}, 0, false);
        sum = mine;
        g[r]->reduce(sum.data(), n, DType::kInt32, ReduceOp::kSum, 0, false);
        if (r != 0) continue;
        for (size_t i = 0; i < n; ++i) {
          int64_t expected = 0;
          for (int p = 0; p < kWorld; ++p) {
            ASSERT_EQ(gathered[p][i], value(round, s, p, i)) << "gather from " << p << " at " << i;
            expected += value(round, s, p, i);
          }
          ASSERT_EQ(sum[i], static_cast<int32_t>(expected)) << "reduce at " << i;
        }
      }
    }
  });
}

// What the stall inspector reads while a collective waits for a peer that has not entered it.
TEST(CollectivesProgress, NamesTheRunningCollectiveAndThePeerItWaitsOn) {
  GroupOptions o;
  o.timeout_ms = 20000;
  auto g = make_groups(2, false, o);
  std::vector<std::vector<float>> x(2, std::vector<float>(10, 1.0f));
  in_threads(2, [&](int r) {
    g[r]->allreduce(x[r].data(), x[r].size(), DType::kFloat32, ReduceOp::kSum, false);
  });
  EXPECT_FALSE(g[0]->progress().running);
  EXPECT_EQ(g[0]->progress().entered, 1u);

  auto work = g[0]->allreduce(x[0].data(), x[0].size(), DType::kFloat32, ReduceOp::kSum, true);
  OpSnapshot p;
  const Deadline give_up(10000);
  do {  // until the lane has begun allreduce #1: waiting_on still names #0's peer before that
    std::this_thread::yield();
    p = g[0]->progress();
  } while ((p.entered != 2 || p.waiting_on != 1) && !give_up.expired());
  EXPECT_TRUE(p.running);
  EXPECT_EQ(p.entered, 2u);  // allreduce #1
  EXPECT_EQ(p.kind, OpKind::kAllreduce);
  EXPECT_EQ(p.dtype, DType::kFloat32);
  EXPECT_EQ(p.nbytes, 40u);
  EXPECT_EQ(p.waiting_on, 1);
  EXPECT_GE(p.elapsed_us, 0);
  EXPECT_EQ(g[1]->progress().entered, 1u);  // the peer has not entered it

  g[1]->allreduce(x[1].data(), x[1].size(), DType::kFloat32, ReduceOp::kSum, false);
  work->wait();
  EXPECT_FALSE(g[0]->progress().running);
  EXPECT_EQ(g[1]->progress().entered, 2u);
  EXPECT_EQ(x[0][0], 4.0f);
}

}  // namespace
}  // namespace pscore
