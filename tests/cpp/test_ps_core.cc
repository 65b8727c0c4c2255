// Unit tests of the parameter server's building blocks: SHA-256/HMAC vectors, JSON, safetensors
// files, the id map, the partitioner, consistency bookkeeping, optimizer kernels, the log.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <thread>

#include "common/error.h"
#include "common/wire_codec.h"
#include "ps/durability/json.h"
#include "ps/durability/safetensors_file.h"
#include "ps/durability/update_log.h"
#include "ps/storage/consistency.h"
#include "ps/storage/optimizer.h"
#include "ps/storage/partitioner.h"
#include "ps/storage/row_map.h"
#include "ps/storage/seq_window.h"
#include "ps/storage/sparse_store.h"
#include "ps/wire/table_spec.h"

using namespace pscore::ps;
using pscore::WireReader;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/pscore_ps_test_XXXXXX";
  return mkdtemp(tmpl);
}

ConsistencySpec ssp_spec(int staleness) {
  ConsistencySpec spec;
  spec.mode = Consistency::kSsp;
  spec.staleness = staleness;
  return spec;
}

}  // namespace

TEST(PsJson, RoundTripAndErrors) {
  Json j = Json::parse(R"({"a": [1, -2, 9007199254740993], "b": {"c": "x\"y\n"}, "d": 1.5,
                           "e": true, "f": null})");
  EXPECT_EQ(j.at("a").as_array()[2].as_int(), 9007199254740993LL);  // exact beyond 2^53
  EXPECT_EQ(j.at("b").at("c").as_string(), "x\"y\n");
  EXPECT_DOUBLE_EQ(j.at("d").as_double(), 1.5);
  EXPECT_TRUE(j.at("e").as_bool());
  EXPECT_EQ(Json::parse(j.dump()).dump(), j.dump());
  for (const char* bad : {"{", "[1,]", "{\"a\" 1}", "tru", "\"abc", "1 2", "{\"a\":01x}"})
    EXPECT_THROW(Json::parse(bad), std::invalid_argument) << bad;
  std::string deep(100, '[');
  EXPECT_THROW(Json::parse(deep), std::invalid_argument);
  EXPECT_THROW(j.at("missing"), std::invalid_argument);
  EXPECT_THROW(j.at("b").as_int("b"), std::invalid_argument);
}

TEST(PsSafetensors, RoundTripAndCorruptFiles) {
  std::string dir = temp_dir();
  std::string path = dir + "/t.safetensors";
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> b = {-1, std::numeric_limits<int64_t>::min()};
  SafetensorsWriter w;
  w.add({"a", "F32", {2, 3}, a.data(), a.size() * 4});
  w.add({"b:ids", "I64", {2}, b.data(), b.size() * 8});
  w.set_metadata("k", "v");
  w.write(path);
  {
    SafetensorsReader r(path);
    const TensorEntry& ta = r.get("a", "F32");
    EXPECT_EQ(ta.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(std::memcmp(ta.data, a.data(), 24), 0);
    EXPECT_EQ(static_cast<const int64_t*>(r.get("b:ids", "I64").data)[1], b[1]);
    EXPECT_EQ(r.metadata_value("k"), "v");
    EXPECT_THROW(r.get("a", "I64"), std::invalid_argument);
    EXPECT_THROW(r.get("zzz", "F32"), std::invalid_argument);
  }
  auto write_raw = [&](const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << bytes;
  };
  auto with_header = [](const std::string& h) {
    uint64_t n = h.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + h;
  };
  write_raw("abc");
  EXPECT_THROW(SafetensorsReader{path}, std::invalid_argument);
  write_raw(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}");
  EXPECT_THROW(SafetensorsReader{path}, std::invalid_argument);
  write_raw(with_header(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"));
  EXPECT_THROW(SafetensorsReader{path}, std::invalid_argument);  // data past the end
  write_raw(with_header(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,4]}})") +
            std::string(4, '\0'));
  EXPECT_THROW(SafetensorsReader{path}, std::invalid_argument);  // shape/size mismatch
  write_raw(with_header(R"({"x":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}})") +
            std::string(4, '\0'));
  EXPECT_THROW(SafetensorsReader{path}, std::invalid_argument);
  // Found writing fuzz_checkpoint: 2^40 x 2^24 elements wrapped around to 0, matching no bytes.
  write_raw(with_header(
      R"({"x":{"dtype":"F32","shape":[1099511627776,16777216],"data_offsets":[0,0]}})"));
  EXPECT_THROW(SafetensorsReader{path}, std::invalid_argument);
  EXPECT_THROW(SafetensorsReader{dir + "/absent"}, pscore::Error);
}

TEST(PsRowMap, ExtremeIdsAndGrowth) {
  RowMap m;
  std::vector<int64_t> ids = {
      0, -1, 1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), -2};
  for (int64_t i = 0; i < 100000; ++i) ids.push_back(i * 7919 - 50000);
  std::vector<int64_t> unique;
  for (int64_t id : ids) {
    bool inserted = false;
    uint32_t row = m.find_or_insert(id, static_cast<uint32_t>(unique.size()), &inserted);
    if (inserted) unique.push_back(id);
    EXPECT_EQ(unique[row], id);
  }
  EXPECT_EQ(m.size(), unique.size());
  for (size_t r = 0; r < unique.size(); ++r) EXPECT_EQ(m.find(unique[r]), static_cast<int64_t>(r));
  EXPECT_EQ(m.find(123456789012345LL), -1);
}

// A reservation no host could hold is refused before anything is allocated (a corrupt log's
// capacity once made a recovering shard abort in the allocator).
TEST(PsSparseStore, AReservationPastTheHostsMemoryIsRefused) {
  SparseStore store(1024, OptimizerSpec{}, InitializerSpec{}, 0);
  EXPECT_THROW(store.reserve(int64_t{1} << 40), std::invalid_argument);  // 2^32 rows x 4 KB
  store.reserve(1000);
  EXPECT_EQ(store.find_or_create(7), 0u);
}

TEST(PsPartitioner, BalancedByBytesAndSpreadsLargeTables) {
  for (int shards : {1, 2, 3, 7}) {
    std::vector<int64_t> loads(shards, 0);
    auto big = plan_dense_parts(16 << 20, 4, loads, {});
    ASSERT_EQ(static_cast<int>(big.size()), shards);  // one large layer spreads over all
    int64_t covered = 0;
    for (const auto& p : big) {
      EXPECT_EQ(p.offset, covered);
      covered += p.numel;
    }
    EXPECT_EQ(covered, 16 << 20);
    // Many small tables of different sizes go to the least loaded shards.
    for (int i = 0; i < 200; ++i) plan_dense_parts(100 + (i * 37) % 5000, 4, loads, {});
    int64_t hi = *std::max_element(loads.begin(), loads.end());
    int64_t lo = *std::min_element(loads.begin(), loads.end());
    EXPECT_LE(hi - lo, 5100 * 4) << shards << " shards";
  }
  std::vector<int64_t> loads(3, 0);
  EXPECT_EQ(plan_dense_parts(0, 4, loads, {}).size(), 1u);
  EXPECT_THROW(plan_dense_parts(-1, 4, loads, {}), std::invalid_argument);
  // Sparse ids spread evenly over shards whatever their pattern.
  std::vector<int> count(4, 0);
  for (int64_t i = 0; i < 40000; ++i) ++count[shard_for_id(i * 4, 4)];
  for (int c : count) EXPECT_NEAR(c, 10000, 500);
}

TEST(PsConsistency, SyncRoundsBackupWorkersAndDone) {
  ConsistencySpec spec;
  spec.mode = Consistency::kSync;
  spec.backup_workers = 1;
  ConsistencyState c(spec, 3);
  int replies = 0;
  auto waiter = [&](int w, uint64_t seq) {
    return Waiter{w, seq, {}, [&](ByteBuffer&&) { ++replies; }};
  };
  EXPECT_EQ(c.admit(0, 10), ConsistencyState::Admission::kNew);
  c.add_contribution(waiter(0, 10));
  EXPECT_EQ(c.admit(0, 10), ConsistencyState::Admission::kPendingInRound);
  EXPECT_FALSE(c.round_ready());
  const int64_t opened = c.round_opened_us();  // when the stall inspector starts counting
  EXPECT_GT(opened, 0);
  c.add_contribution(waiter(2, 5));
  EXPECT_EQ(c.round_opened_us(), opened);  // the first push opened it
  EXPECT_TRUE(c.round_ready());            // 3 workers - 1 backup
  auto released = c.close_round();
  EXPECT_EQ(released.size(), 2u);
  EXPECT_EQ(c.round(), 1);
  EXPECT_EQ(c.round_opened_us(), 0);
  EXPECT_EQ(c.admit(0, 10), ConsistencyState::Admission::kDuplicate);
  EXPECT_TRUE(c.is_late(0));  // worker 1's round-0 push is now late
  c.set_done(1);
  c.set_done(2);
  c.add_contribution(waiter(0, 11));
  EXPECT_TRUE(c.round_ready());  // only worker 0 is active
}

TEST(PsConsistency, SspStalenessBound) {
  ConsistencyState c(ssp_spec(2), 2);
  c.advance_clock(0, 2);
  EXPECT_TRUE(c.may_proceed(0));
  c.advance_clock(0, 3);
  EXPECT_FALSE(c.may_proceed(0));  // 3 ahead of worker 1's 0
  EXPECT_EQ(c.oldest_parked_us(), 0);
  c.park(Waiter{0, 1, {}, nullptr});
  EXPECT_TRUE(c.release_ready().empty());
  EXPECT_EQ(c.parked_workers(), std::vector<int>{0});
  EXPECT_GT(c.oldest_parked_us(), 0);
  c.advance_clock(1, 1);
  EXPECT_EQ(c.release_ready().size(), 1u);
  EXPECT_TRUE(c.parked_workers().empty());
  EXPECT_EQ(c.oldest_parked_us(), 0);
  c.advance_clock(0, 10);
  c.set_done(1);  // a finished worker no longer holds others back
  EXPECT_TRUE(c.may_proceed(0));
}

TEST(PsConsistency, SspOldestParkedIsTheFirstParked) {
  ConsistencyState c(ssp_spec(0), 2);
  c.advance_clock(0, 1);
  c.park(Waiter{0, 1, {}, nullptr});
  const int64_t first = c.oldest_parked_us();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a later now_us for the second
  c.park(Waiter{0, 2, {}, nullptr});
  EXPECT_EQ(c.oldest_parked_us(), first);
  EXPECT_EQ(c.parked_workers(), std::vector<int>{0});
  c.advance_clock(1, 1);
  EXPECT_EQ(c.release_ready().size(), 2u);
  EXPECT_EQ(c.oldest_parked_us(), 0);
}

TEST(PsOptimizer, SgdMomentumNesterovAndClipping) {
  OptimizerSpec s;
  s.lr = 0.1;
  s.momentum = 0.9;
  s.nesterov = true;
  std::vector<float> p = {1.0f}, g = {0.5f}, buf = {0};
  apply_optimizer(s, p.data(), g.data(), buf.data(), 1, 1);
  // step 1: buf = g; d = g + 0.9 * buf = 0.95; p = 1 - 0.095
  EXPECT_FLOAT_EQ(buf[0], 0.5f);
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.1f * 0.95f);
  apply_optimizer(s, p.data(), g.data(), buf.data(), 1, 2);
  EXPECT_FLOAT_EQ(buf[0], 0.9f * 0.5f + 0.5f);
  s.clip_value = 0.25;
  std::vector<float> v = {-1.0f, 0.1f, 2.0f};
  clip_gradient_values(s, v.data(), 3);
  EXPECT_EQ(v, (std::vector<float>{-0.25f, 0.1f, 0.25f}));
  s.clip_norm = 1.0;
  EXPECT_NEAR(clip_norm_factor(s, 4.0), 0.25f, 1e-6);
  EXPECT_FLOAT_EQ(clip_norm_factor(s, 0.5), 1.0f);
  OptimizerSpec bad;
  bad.lr = -1;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

TEST(PsUpdateLog, ReplayStopsAtTornTail) {
  std::string path = temp_dir() + "/w.wal";
  {
    UpdateLog log(path, 5, false);
    for (int i = 0; i < 3; ++i) {
      int64_t v = i * 10;
      log.append(LogKind::kGlobalStep, {{&v, 8}});
    }
    EXPECT_EQ(log.mark().index, 8u);
  }
  {
    std::ofstream f(path, std::ios::binary | std::ios::app);
    f << "PSWL garbage that is not a whole record";
  }
  std::vector<int64_t> seen;
  uint64_t intact = 0;
  uint64_t next = UpdateLog::replay(
      path, 6, [&](LogKind, uint64_t, WireReader& r) { seen.push_back(r.i64("value")); }, &intact);
  EXPECT_EQ(seen, (std::vector<int64_t>{10, 20}));  // index 5 is before from_index
  EXPECT_EQ(next, 8u);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  EXPECT_LT(intact, static_cast<uint64_t>(f.tellg()));
}

// Found by fuzz_update_log: a record header whose length runs past the end of the file is a torn
// tail, and replay stops there before allocating that length.
TEST(PsUpdateLog, ReplayStopsAtALengthPastTheEndOfTheFile) {
  std::string path = temp_dir() + "/long.wal";
  {
    UpdateLog log(path, 0, false);
    int64_t step = 7;
    log.append(LogKind::kGlobalStep, {{&step, 8}});
  }
  uint64_t intact = 0;
  UpdateLog::replay(path, 0, [](LogKind, uint64_t, WireReader&) {}, &intact);
  {
    const uint32_t magic = 0x4c575350;  // "PSWL"
    const uint8_t kind_and_reserved[4] = {static_cast<uint8_t>(LogKind::kGlobalStep), 0, 0, 0};
    const uint64_t index = 1, length = uint64_t(1) << 39;
    std::ofstream f(path, std::ios::binary | std::ios::app);
    f.write(reinterpret_cast<const char*>(&magic), 4);
    f.write(reinterpret_cast<const char*>(kind_and_reserved), 4);
    f.write(reinterpret_cast<const char*>(&index), 8);
    f.write(reinterpret_cast<const char*>(&length), 8);
    f << "a few bytes, not 2^39";
  }
  std::vector<int64_t> seen;
  uint64_t intact_after = 0;
  const uint64_t next = UpdateLog::replay(
      path, 0, [&](LogKind, uint64_t, WireReader& r) { seen.push_back(r.i64("step")); },
      &intact_after);
  EXPECT_EQ(seen, (std::vector<int64_t>{7}));
  EXPECT_EQ(next, 1u);
  EXPECT_EQ(intact_after, intact);
}

// A snapshot marks the log, the shard goes on appending while the snapshot is written, then the
// records before the mark are dropped: those after it stay, with their indices, and appending
// goes on into the new file.
TEST(PsUpdateLog, DropBeforeKeepsWhatWasAppendedSinceTheMark) {
  std::string path = temp_dir() + "/d.wal";
  auto read_all = [&](uint64_t from) {
    std::vector<std::pair<uint64_t, int64_t>> seen;
    uint64_t intact = 0;
    UpdateLog::replay(
        path, from,
        [&](LogKind, uint64_t i, WireReader& r) { seen.emplace_back(i, r.i64("value")); }, &intact);
    return seen;
  };
  UpdateLog log(path, 0, false);
  auto append = [&](int64_t v) { log.append(LogKind::kGlobalStep, {{&v, 8}}); };
  append(1);
  append(2);
  const UpdateLog::Mark mark = log.mark();
  EXPECT_EQ(mark.index, 2u);
  append(3);  // while the snapshot is being written
  log.drop_before(mark);
  append(4);
  using Seen = std::vector<std::pair<uint64_t, int64_t>>;
  EXPECT_EQ(read_all(0), (Seen{{2, 3}, {3, 4}}));
  const UpdateLog::Mark end = log.mark();
  log.drop_before(end);  // nothing appended since: the log empties
  EXPECT_TRUE(read_all(0).empty());
  append(5);
  EXPECT_EQ(read_all(0), (Seen{{4, 5}}));
  log.drop_before(UpdateLog::Mark{});  // a mark at the start drops nothing
  EXPECT_EQ(read_all(0), (Seen{{4, 5}}));
}

// A record the disk takes only in part (here RLIMIT_FSIZE stops the write part-way, as ENOSPC
// does on a full disk) fails the append and is cut off again: the records appended once there
// is room follow the last whole one, and replay reads them all.
TEST(PsUpdateLog, AFailedAppendLeavesNoPartialRecord) {
  std::string path = temp_dir() + "/f.wal";
  UpdateLog log(path, 0, false);
  auto append = [&](int64_t v) { log.append(LogKind::kGlobalStep, {{&v, 8}}); };
  append(1);
  const uint64_t whole = log.bytes();
  std::vector<char> big(4096, 'x');
  struct rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  void (*previous)(int) = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limited = saved;
  limited.rlim_cur = whole + 64;  // room for part of the next record only
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  EXPECT_THROW(log.append(LogKind::kGlobalStep, {{big.data(), big.size()}}), pscore::Error);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, previous);
  EXPECT_EQ(log.bytes(), whole);
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  EXPECT_EQ(static_cast<uint64_t>(f.tellg()), whole);
  append(2);
  std::vector<std::pair<uint64_t, int64_t>> seen;
  uint64_t intact = 0;
  UpdateLog::replay(
      path, 0, [&](LogKind, uint64_t i, WireReader& r) { seen.emplace_back(i, r.i64("value")); },
      &intact);
  EXPECT_EQ(seen, (std::vector<std::pair<uint64_t, int64_t>>{{0, 1}, {1, 2}}));
}

TEST(PsSeqWindow, OutOfOrderRetriesAreNewDuplicatesAreNot) {
  SeqWindow w;
  w.insert(100);
  w.insert(103);  // 101 and 102 are still in flight (another thread's pushes)
  EXPECT_TRUE(w.contains(100));
  EXPECT_FALSE(w.contains(101));
  EXPECT_FALSE(w.contains(102));
  EXPECT_TRUE(w.contains(103));
  w.insert(101);
  EXPECT_TRUE(w.contains(101));
  EXPECT_FALSE(w.contains(102));
  w.insert(103 + SeqWindow::kBits);  // far ahead: everything older counts as seen
  EXPECT_TRUE(w.contains(102));
  EXPECT_FALSE(w.contains(104 + SeqWindow::kBits));
  SeqWindow copy;
  copy.restore(w.high(), w.bits_hex());
  for (uint64_t s = w.high() - 10; s <= w.high() + 1; ++s)
    EXPECT_EQ(copy.contains(s), w.contains(s));
  SeqWindow coarse;
  coarse.restore(50, "");
  EXPECT_TRUE(coarse.contains(50));
  EXPECT_TRUE(coarse.contains(49));
  EXPECT_FALSE(coarse.contains(51));
}

// Found by fuzz_ps_wire: two dimensions within the limit whose product overflows int64 (and
// wrapped to 0, passing the element cap) are too many elements.
TEST(PsTableSpec, ShapeWhoseProductOverflowsIsRejected) {
  TableSpec s;
  s.name = "t";
  s.shape = {int64_t(1) << 40, int64_t(1) << 30};
  EXPECT_THROW(s.validate(1), std::invalid_argument);
  s.shape = {int64_t(1) << 20, int64_t(1) << 20};
  EXPECT_NO_THROW(s.validate(1));
}

TEST(PsTableSpec, DifferencesNameEachSettingWithBothValues) {
  TableSpec a;
  a.name = "emb";
  a.kind = TableKind::kSparse;
  a.shape = {64};
  a.optimizer.kind = OptimizerKind::kAdam;
  a.optimizer.lr = 0.001;
  TableSpec b = a;
  EXPECT_TRUE(a.same_as(b));
  EXPECT_TRUE(a.differences(b).empty());
  b.optimizer.lr = 0.0010000000000000002;  // shown exactly, so never alike
  EXPECT_EQ(a.describe_differences(b), "lr: 0.001 vs 0.0010000000000000002");
  b.shape = {32};
  b.optimizer.kind = OptimizerKind::kSgd;
  b.consistency.mode = Consistency::kSync;
  EXPECT_FALSE(a.same_as(b));
  EXPECT_EQ(a.describe_differences(b),
            "dim: 64 vs 32; optimizer: adam vs sgd; consistency: async vs sync");
}
