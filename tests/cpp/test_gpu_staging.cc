// CUDA buffers staged through pinned host blocks (gpu/staging.h, gpu/pinned_pool.h), against the
// fake CUDA runtime (tests/fakes/fake_cudart.c, built next to this test): chunks and their copies
// on the caller's stream, blocks reused only once no copy uses them, CUDA errors and stuck
// streams named by the operation, mixed devices refused. The fake runs a queued copy only when
// the host waits for it, so a missing wait shows as a wrong value.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "fake_gpu.h"
#include "gpu/staging.h"

namespace pscore::gpu {
namespace {

// The fake's test switches, through the handle the core loaded (same path, same library).
struct Fake {
  size_t (*read_log)(char*, size_t);
  void (*reset)();
  void (*set_stuck)(int);
  void (*fail)(const char*, int);

  Fake() {
    set_cuda_runtime_candidates({PSCORE_FAKE_CUDART});
    cuda_runtime();
    read_log = fake_switch<size_t(char*, size_t)>(PSCORE_FAKE_CUDART, "fake_cudart_read_log");
    reset = fake_switch<void()>(PSCORE_FAKE_CUDART, "fake_cudart_reset");
    set_stuck = fake_switch<void(int)>(PSCORE_FAKE_CUDART, "fake_cudart_set_stuck");
    fail = fake_switch<void(const char*, int)>(PSCORE_FAKE_CUDART, "fake_cudart_fail");
  }

  // The calls logged since the last reset whose line starts with `prefix`.
  std::vector<std::string> calls(const std::string& prefix) {
    std::string text(read_log(nullptr, 0) + 1, '\0');
    read_log(text.data(), text.size());
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
      std::string line = text.substr(at, end - at);
      if (line.rfind(prefix, 0) == 0) out.push_back(line);
    }
    return out;
  }
};

Fake& fake() {
  static Fake* f = new Fake();  // never freed: the runtime stays loaded
  f->reset();
  f->set_stuck(0);
  f->fail(nullptr, 0);
  set_staging_chunk_bytes(64);
  return *f;
}

void synchronize() { cuda_runtime().cudaStreamSynchronize(nullptr); }

TEST(Staging, InPlaceRunsChunkByChunkOnTheCallersStream) {
  Fake& f = fake();
  PinnedPool pool;
  std::vector<float> device(40, 1.0f);  // 160 bytes: chunks of 16, 16 and 8 floats
  for (int round = 0; round < 2; ++round) {
    std::vector<size_t> counts;
    run_in_place(pool, cuda_view(device, 42), Copy::kInOut, "all_reduce", 1000,
                 [&](void* host, size_t n) {
                   counts.push_back(n);
                   float* x = static_cast<float*>(host);
                   for (size_t i = 0; i < n; ++i) x[i] = x[i] * 2 + 1;
                 });
    EXPECT_EQ(counts, (std::vector<size_t>{16, 16, 8}));
    EXPECT_EQ(device[0], round == 0 ? 1.0f : 3.0f) << "the copy back ran before the stream did";
    synchronize();
    for (float x : device) ASSERT_EQ(x, round == 0 ? 3.0f : 7.0f);
    EXPECT_EQ(pool.block_count(), 3u) << "round " << round << ": blocks not reused";
  }
  // Per chunk and round: in, then back as a 2D copy (a small copy to the device).
  const auto copies = f.calls("cudaMemcpy");
  ASSERT_EQ(copies.size(), 12u);
  for (const auto& line : copies) EXPECT_NE(line.find(" stream=42 "), std::string::npos) << line;
  EXPECT_EQ(f.calls("cudaMemcpy2DAsync").size(), 6u);
}

TEST(Staging, SmallCopiesToTheDeviceGoInRowsLargeOnesFlat) {
  Fake& f = fake();
  set_staging_chunk_bytes(1 << 20);
  PinnedPool pool;
  for (size_t floats : {size_t{16}, size_t{16} << 10}) {  // 64 bytes, 64 KB
    f.reset();
    std::vector<float> device(floats, 1.0f);
    run_in_place(pool, cuda_view(device, 5), Copy::kInOut, "all_reduce", 1000,
                 [&](void* host, size_t n) {
                   for (size_t i = 0; i < n; ++i) static_cast<float*>(host)[i] += 1;
                 });
    synchronize();
    for (float x : device) ASSERT_EQ(x, 2.0f);
    const auto copies = f.calls("cudaMemcpy");
    ASSERT_EQ(copies.size(), 2u);
    const std::string bytes = " bytes=" + std::to_string(floats * sizeof(float)) + " ";
    const std::string back = floats == 16 ? "cudaMemcpy2DAsync stream=5 kind=1" + bytes + "rows=16 "
                                          : "cudaMemcpyAsync stream=5 kind=1" + bytes;
    EXPECT_EQ(copies[1].rfind(back, 0), 0u) << copies[1];
  }
}

TEST(Staging, BuffersCrossAsTheirCopySays) {
  fake();
  PinnedPool pool;
  std::vector<float> in(8, 5.0f), out(8, 0.0f);
  const BufferView a = cuda_view(in, 7), b = cuda_view(out, 7);
  run_staged(pool, {&a, &b}, {Copy::kIn, Copy::kOut}, "all_gather", 1000,
             [&](const std::vector<void*>& host) {
               ASSERT_EQ(static_cast<float*>(host[0])[7], 5.0f) << "read before the copy in";
               std::memcpy(host[1], host[0], 8 * sizeof(float));
             });
  EXPECT_EQ(out[0], 0.0f);
  synchronize();
  EXPECT_EQ(out, in);
}

TEST(Staging, HostBuffersRunInPlaceWithoutTheRuntime) {
  Fake& f = fake();
  PinnedPool pool;
  std::vector<float> v(4, 1.0f);
  BufferView b = cuda_view(v, 0);
  b.device = DeviceType::kCpu;
  run_in_place(pool, b, Copy::kInOut, "all_reduce", 1000, [&](void* host, size_t n) {
    EXPECT_EQ(host, v.data());
    EXPECT_EQ(n, 4u);
  });
  EXPECT_TRUE(f.calls("cuda").empty());
  EXPECT_EQ(pool.block_count(), 0u);
}

TEST(Staging, MixedDevicesAreRefused) {
  fake();
  std::vector<float> v(4);
  BufferView on_gpu = cuda_view(v, 0), on_host = cuda_view(v, 0), other_gpu = cuda_view(v, 0, 1);
  on_host.device = DeviceType::kCpu;
  try {
    on_cuda({&on_gpu, &on_host}, "all_gather");
    FAIL() << "a CUDA and a host buffer in one call";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "all_gather: tensors on cuda:0 and cpu in one call; pass every tensor on one "
                 "device");
  }
  EXPECT_THROW(on_cuda({&on_gpu, &other_gpu}, "all_gather"), std::invalid_argument);
  BufferView other_stream = cuda_view(v, 9);
  try {
    on_cuda({&on_gpu, &other_stream}, "all_to_all");
    FAIL() << "two streams in one call";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "all_to_all: tensors ordered on two CUDA streams (0 and 9) in one call");
  }
  EXPECT_FALSE(on_cuda({&on_host}, "all_gather"));
  EXPECT_TRUE(on_cuda({&on_gpu}, "all_gather"));
}

TEST(Staging, ACudaErrorNamesTheOperationAndTheCall) {
  Fake& f = fake();
  PinnedPool pool;
  std::vector<float> v(8, 1.0f);
  f.fail("cudaMemcpyAsync", 700);
  try {
    run_in_place(pool, cuda_view(v, 0), Copy::kIn, "broadcast", 1000, [](void*, size_t) {});
    FAIL() << "the copy failed";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "broadcast: cudaMemcpyAsync device to host of 32 bytes: an illegal memory access "
                 "was encountered (CUDA error 700)");
  }
}

TEST(Staging, AStuckStreamTimesOutAndKeepsItsBlocksOutOfUse) {
  Fake& f = fake();
  PinnedPool pool;
  std::vector<float> v(8, 1.0f);
  f.set_stuck(1);
  bool ran = false;
  try {
    run_in_place(pool, cuda_view(v, 0), Copy::kInOut, "all_reduce", 50,
                 [&](void*, size_t) { ran = true; });
    FAIL() << "the stream is stuck";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("all_reduce: the copy of cuda:0 memory to the host did "
                                          "not finish within 50 ms",
                                          0),
              0u)
        << e.what();
  }
  EXPECT_FALSE(ran);
  PinnedPool::Block* fresh = pool.lease(32, "t");  // the stuck copy still targets the first
  EXPECT_EQ(pool.block_count(), 2u);
  pool.release(fresh, nullptr, 0);
  f.set_stuck(0);
  synchronize();
  PinnedPool::Block* reused = pool.lease(32, "t");
  EXPECT_EQ(pool.block_count(), 2u);
  pool.release(reused, nullptr, 0);
  synchronize();
  EXPECT_TRUE(f.calls("VIOLATION").empty());
}

}  // namespace
}  // namespace pscore::gpu
