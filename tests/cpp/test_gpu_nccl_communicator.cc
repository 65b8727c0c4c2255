// The NCCL communicator over the fakes of tests/fakes/ (a host-memory CUDA runtime and a one-rank
// NCCL, built by tests/cpp/CMakeLists.txt): operations on the buffer's stream, the watchdog's
// timeout and async-error aborts, and enqueues racing the watchdog (run under the sanitizers).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "fake_gpu.h"
#include "gpu/nccl_communicator.h"

namespace pscore::gpu {
namespace {

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("FAKE_NCCL_CUDART", PSCORE_FAKE_CUDART, 1);
    set_cuda_runtime_candidates({PSCORE_FAKE_CUDART});
    set_nccl_candidates({PSCORE_FAKE_NCCL});
  }
  void TearDown() override {
    set_stuck(0);
    set_async_error(0);
  }
  static void set_stuck(int value) {
    cuda_runtime();
    fake_switch<void(int)>(PSCORE_FAKE_CUDART, "fake_cudart_set_stuck")(value);
  }
  // Unsticks the fake and runs everything queued, so the events of stuck operations complete
  // (and are freed when their Works go).
  static void drain() {
    set_stuck(0);
    const auto& cuda = cuda_runtime();
    cuda.check(cuda.cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }
  static void set_async_error(int code) {
    nccl();
    fake_switch<void(int)>(PSCORE_FAKE_NCCL, "fake_nccl_set_async_error")(code);
  }
  static std::unique_ptr<NcclCommunicator> make(int64_t timeout_ms = 60000) {
    NcclOptions o;
    o.timeout_ms = timeout_ms;
    o.ranks = {0};
    return std::make_unique<NcclCommunicator>(o, NcclCommunicator::unique_id());
  }
  static BufferView on_gpu(std::vector<float>& values, uintptr_t stream = 7) {
    return cuda_view(values, stream);
  }
};

TEST_F(NcclCommunicatorTest, OperationsCompleteInStreamOrder) {
  auto comm = make();
  std::vector<float> in = {1, 2, 3}, out(3, 0.0f);
  ASSERT_TRUE(comm->allreduce(on_gpu(in), ReduceOp::kSum)->wait(10000));
  auto work = comm->allgather(on_gpu(in), {on_gpu(out)});
  EXPECT_EQ(out[0], 0.0f);  // queued on the fake's stream until the host waits
  ASSERT_TRUE(work->wait(10000));
  EXPECT_EQ(out, in);
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(work->exception(), nullptr);
  comm->destroy();
  comm->destroy();  // idempotent
  EXPECT_THROW(comm->allreduce(on_gpu(in), ReduceOp::kSum), Error);
}

TEST_F(NcclCommunicatorTest, BadArgumentsAreRefusedBeforeNccl) {
  auto comm = make();
  std::vector<float> x = {1};
  BufferView host = on_gpu(x);
  host.device = DeviceType::kCpu;
  EXPECT_THROW(comm->allreduce(host, ReduceOp::kSum), std::invalid_argument);
  EXPECT_THROW(comm->allreduce(on_gpu(x), ReduceOp::kBxor), std::invalid_argument);
  EXPECT_THROW(comm->broadcast(on_gpu(x), 1), std::invalid_argument);
  EXPECT_THROW(comm->send(on_gpu(x), 0), std::invalid_argument);
  EXPECT_THROW(NcclCommunicator(NcclOptions{}, "short id"), std::invalid_argument);
}

TEST_F(NcclCommunicatorTest, AStuckOperationTimesOutAndAbortsTheCommunicator) {
  auto comm = make(200);
  std::vector<float> x = {1, 2};
  set_stuck(1);
  auto stuck = comm->allreduce(on_gpu(x), ReduceOp::kSum);
  auto later = comm->allreduce(on_gpu(x), ReduceOp::kSum);
  try {
    stuck->wait(30000);
    FAIL() << "the operation never completes";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: nccl allreduce #1 (group world, ranks [0]) "
                                         "timed out after 200 ms"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(later->wait(30000), TimeoutError);
  EXPECT_THROW(comm->allreduce(on_gpu(x), ReduceOp::kSum), TimeoutError);
  EXPECT_NE(comm->broken_reason().find("timed out"), std::string::npos);
  drain();
}

TEST_F(NcclCommunicatorTest, AnAsyncErrorAbortsWithNcclsMessage) {
  auto comm = make();
  std::vector<float> x = {1};
  set_stuck(1);
  auto work = comm->allreduce(on_gpu(x), ReduceOp::kSum);
  set_async_error(6);
  try {
    work->wait(30000);
    FAIL() << "the communicator reported an error";
  } catch (const TimeoutError&) {
    FAIL() << "an async error is not a timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NCCL reported an asynchronous error"), std::string::npos)
        << e.what();
  }
  drain();
}

TEST_F(NcclCommunicatorTest, ThreadsEnqueueWhileTheWatchdogSweeps) {
  auto comm = make(60000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&comm, t] {
      std::vector<float> x(16, float(t));
      for (int i = 0; i < 200; ++i) {
        auto work = comm->allreduce(on_gpu(x, 10 + t), ReduceOp::kMax);
        if (i % 50 == 0) work->wait(10000);
      }
    });
  }
  for (auto& t : threads) t.join();
  comm->destroy();
  EXPECT_EQ(comm->broken_reason(), "");
}

}  // namespace
}  // namespace pscore::gpu
