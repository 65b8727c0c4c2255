/* A host-memory fake of NCCL for pscore's host tests: it exports the entry points of
 * csrc/gpu/nccl.h's Nccl table with NCCL's public signatures. Test code only: never shipped,
 * loaded only where a test points PSCORE_NCCL_LIBRARY here.
 *
 * The model: one rank. A communicator of one rank runs every collective over host memory:
 * with one rank each result is the input, so an operation is a copy from its send buffer to its
 * receive buffer (none when they are the same), enqueued with the fake CUDA runtime's
 * cudaMemcpyAsync on the operation's stream (the library FAKE_NCCL_CUDART or
 * PSCORE_CUDART_LIBRARY names), so it runs in stream order with the caller's other work.
 * Communicators of more ranks can be made (ncclCommInitRank logs the id they were given, so
 * tests see the id exchange) but refuse operations with ncclInvalidUsage.
 *
 * Test switches (exported functions; the environment sets their starting values):
 *   fake_nccl_set_async_error(code)  ncclCommGetAsyncError reports `code` from now on
 *                                    (FAKE_NCCL_ASYNC_ERROR=code);
 *   fake_nccl_read_log(out, cap)     the calls so far, one line each, integers in decimal:
 *                                    "ncclAllReduce count=4 dtype=7 op=0 stream=42";
 *   fake_nccl_reset()                empties the log;
 *   FAKE_NCCL_VERSION=N              the version code ncclGetVersion reports (22105 unless set);
 *   FAKE_NCCL_INIT_ERROR=code        ncclCommInitRank fails with `code`. */

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_log.h"

typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef void* cudaStream_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef struct FakeComm {
  int nranks;
  int rank;
}* ncclComm_t;

enum {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int version_code = 22105;
static ncclResult_t async_error;
static ncclResult_t init_error;
static int group_depth;
static unsigned long long ids_made;
typedef int (*MemcpyAsync)(void*, const void*, size_t, int, cudaStream_t);
static MemcpyAsync memcpy_async;

static void init_locked(void) {
  if (initialized) return;
  initialized = 1;
  const char* version = getenv("FAKE_NCCL_VERSION");
  if (version) version_code = atoi(version);
  const char* error = getenv("FAKE_NCCL_ASYNC_ERROR");
  if (error) async_error = atoi(error);
  const char* init = getenv("FAKE_NCCL_INIT_ERROR");
  if (init) init_error = atoi(init);
  const char* cudart = getenv("FAKE_NCCL_CUDART");
  if (!cudart) cudart = getenv("PSCORE_CUDART_LIBRARY");
  void* runtime = cudart ? dlopen(cudart, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (runtime) memcpy_async = (MemcpyAsync)dlsym(runtime, "cudaMemcpyAsync");
}

#define ENTER(...)           \
  pthread_mutex_lock(&lock); \
  init_locked();             \
  log_line_locked(__VA_ARGS__);

static ncclResult_t leave(ncclResult_t result) {
  pthread_mutex_unlock(&lock);
  return result;
}

static size_t dtype_size(ncclDataType_t dtype) {
  switch (dtype) {
    case 0:
    case 1:
      return 1; /* int8, uint8 */
    case 2:
    case 3:
      return 4; /* int32, uint32 */
    case 4:
    case 5:
      return 8; /* int64, uint64 */
    case 6:
    case 9:
      return 2; /* float16, bfloat16 */
    case 7:
      return 4; /* float32 */
    case 8:
      return 8; /* float64 */
    default:
      return 0;
  }
}

/* Checks an operation's arguments and copies count elements send -> recv on `stream`. */
static ncclResult_t copy_locked(const void* send, void* recv, size_t count, ncclDataType_t dtype,
                                ncclComm_t comm, cudaStream_t stream) {
  size_t size = dtype_size(dtype);
  if (!comm || !size) return kInvalidArgument;
  if (comm->nranks != 1) return kInvalidUsage;
  if (send == recv || !count) return kSuccess;
  if (!memcpy_async) {
    memmove(recv, send, count * size);
    return kSuccess;
  }
  return memcpy_async(recv, send, count * size, 3 /* device to device */, stream)
             ? kUnhandledCudaError
             : kSuccess;
}

/* ---- the Nccl table -------------------------------------------------------------------- */

ncclResult_t ncclGetVersion(int* version) {
  ENTER("ncclGetVersion");
  *version = version_code;
  return leave(kSuccess);
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  ENTER("ncclGetUniqueId");
  memset(id->internal, 0, sizeof id->internal);
  snprintf(id->internal, sizeof id->internal, "fake-nccl-id-%d-%llu", (int)getpid(), ++ids_made);
  id->internal[127] = 'Z'; /* the last byte travels too */
  return leave(kSuccess);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  ENTER("ncclCommInitRank nranks=%d rank=%d id=%.100s last=%c", nranks, rank, id.internal,
        id.internal[127]);
  if (init_error) return leave(init_error);
  if (nranks < 1 || rank < 0 || rank >= nranks) return leave(kInvalidArgument);
  *comm = calloc(1, sizeof **comm);
  (*comm)->nranks = nranks;
  (*comm)->rank = rank;
  return leave(kSuccess);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  ENTER("ncclCommAbort");
  if (!comm) return leave(kInvalidArgument);
  free(comm);
  return leave(kSuccess);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ENTER("ncclCommDestroy");
  if (!comm) return leave(kInvalidArgument);
  free(comm);
  return leave(kSuccess);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  pthread_mutex_lock(&lock); /* polled often: not logged */
  init_locked();
  *error = comm ? async_error : kInvalidArgument;
  return leave(kSuccess);
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case kSuccess:
      return "no error";
    case kUnhandledCudaError:
      return "unhandled cuda error (fake NCCL)";
    case kSystemError:
      return "unhandled system error (fake NCCL)";
    case kInternalError:
      return "internal error (fake NCCL)";
    case kInvalidArgument:
      return "invalid argument (fake NCCL)";
    case kInvalidUsage:
      return "invalid usage: the fake NCCL runs one rank only";
    case kRemoteError:
      return "remote process exited or there was a network error (fake NCCL)";
    default:
      return "unknown result (fake NCCL)";
  }
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t dtype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  ENTER("ncclAllReduce count=%zu dtype=%d op=%d stream=%llu", count, dtype, op, U(stream));
  if (op < 0 || op > 4) return leave(kInvalidArgument);
  return leave(copy_locked(send, recv, count, dtype, comm, stream));
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t dtype,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  ENTER("ncclBroadcast count=%zu dtype=%d root=%d stream=%llu", count, dtype, root, U(stream));
  if (root != 0) return leave(kInvalidArgument);
  return leave(copy_locked(send, recv, count, dtype, comm, stream));
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t dtype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  ENTER("ncclReduce count=%zu dtype=%d op=%d root=%d stream=%llu", count, dtype, op, root,
        U(stream));
  if (op < 0 || op > 4 || root != 0) return leave(kInvalidArgument);
  return leave(copy_locked(send, recv, count, dtype, comm, stream));
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t dtype,
                           ncclComm_t comm, cudaStream_t stream) {
  ENTER("ncclAllGather count=%zu dtype=%d stream=%llu", count, dtype, U(stream));
  return leave(copy_locked(send, recv, count, dtype, comm, stream));
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t dtype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  ENTER("ncclReduceScatter count=%zu dtype=%d op=%d stream=%llu", count, dtype, op, U(stream));
  if (op < 0 || op > 4) return leave(kInvalidArgument);
  return leave(copy_locked(send, recv, count, dtype, comm, stream));
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t dtype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  ENTER("ncclSend count=%zu dtype=%d peer=%d stream=%llu", count, dtype, peer, U(stream));
  return leave(kInvalidUsage); /* one rank has no peer */
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t dtype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  ENTER("ncclRecv count=%zu dtype=%d peer=%d stream=%llu", count, dtype, peer, U(stream));
  return leave(kInvalidUsage);
}

ncclResult_t ncclGroupStart(void) {
  ENTER("ncclGroupStart");
  group_depth++;
  return leave(kSuccess);
}

ncclResult_t ncclGroupEnd(void) {
  ENTER("ncclGroupEnd");
  if (group_depth == 0) return leave(kInvalidUsage);
  group_depth--;
  return leave(kSuccess);
}

/* ---- test switches --------------------------------------------------------------------- */

void fake_nccl_set_async_error(int code) {
  pthread_mutex_lock(&lock);
  init_locked();
  async_error = code;
  pthread_mutex_unlock(&lock);
}

size_t fake_nccl_read_log(char* out, size_t capacity) {
  pthread_mutex_lock(&lock);
  size_t size = log_read_locked(out, capacity);
  pthread_mutex_unlock(&lock);
  return size;
}

void fake_nccl_reset(void) {
  pthread_mutex_lock(&lock);
  log_clear_locked();
  pthread_mutex_unlock(&lock);
}
