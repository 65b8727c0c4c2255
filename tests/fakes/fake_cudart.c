/* A host-memory fake of the CUDA runtime for pscore's host tests: it exports every entry point
 * of csrc/gpu/cuda_runtime.h's CudaRuntime table with the public runtime API's signatures.
 * Test code only: never shipped, loaded only where a test points PSCORE_CUDART_LIBRARY here.
 *
 * The model: "device" memory is host memory (cudaMalloc is malloc). Work enqueued on a stream
 * (cudaMemcpyAsync, cudaMemcpy2DAsync, cudaEventRecord) is queued in one FIFO and runs only when
 * the host waits for it (a query that reports it done, or a synchronize), as a real device may run
 * it late: code that reads a copy's destination without waiting reads stale bytes. Streams and
 * events are opaque handles; the FIFO keeps enqueue order, which satisfies every cross-stream wait.
 *
 * Test switches (exported functions; the environment sets their starting values):
 *   fake_cudart_set_stuck(1)            queued work never completes: queries say not-ready and a
 *                                       synchronize blocks until fake_cudart_set_stuck(0)
 *                                       (FAKE_CUDART_STUCK=1);
 *   fake_cudart_fail(name, status)      entry point `name` returns `status` from now on; NULL
 *                                       name clears it (FAKE_CUDART_FAIL=name=status);
 *   fake_cudart_read_log(out, cap)      the calls so far, one line each, integers in decimal:
 *                                       "cudaMemcpyAsync stream=42 kind=2 bytes=64 dst=N src=N";
 *   fake_cudart_reset()                 empties the log;
 *   FAKE_CUDART_DEVICES=N               the device count (1 unless set).
 * Freeing pinned memory a queued copy still uses is logged as "VIOLATION ..." and refused. */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_log.h"

typedef int cudaError_t;
typedef void* cudaStream_t;
typedef struct FakeEvent* cudaEvent_t;

enum {
  kSuccess = 0,
  kInvalidValue = 1,
  kMemoryAllocation = 2,
  kInvalidDevice = 101,
  kInvalidResourceHandle = 400,
  kNotReady = 600,
};

typedef enum { kCopy, kRecord } OpKind;

typedef struct Op {
  OpKind kind;
  void* dst;
  const void* src;
  size_t bytes;
  cudaEvent_t event;
  struct Op* next;
} Op;

struct FakeEvent {
  unsigned long long pending; /* its records still queued; 0: done (or never recorded) */
  int destroyed;              /* cudaEventDestroy came while a record was queued: freed after */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t unstuck = PTHREAD_COND_INITIALIZER;
static int initialized;
static int stuck;
static int device_count = 1;
static char fail_name[64];
static cudaError_t fail_status;
static Op* queue_head;
static Op* queue_tail;
static __thread int current_device;

static void init_locked(void) {
  if (initialized) return;
  initialized = 1;
  const char* devices = getenv("FAKE_CUDART_DEVICES");
  if (devices) device_count = atoi(devices);
  const char* stuck_env = getenv("FAKE_CUDART_STUCK");
  if (stuck_env) stuck = atoi(stuck_env);
  const char* fail = getenv("FAKE_CUDART_FAIL");
  const char* eq = fail ? strchr(fail, '=') : NULL;
  if (eq && (size_t)(eq - fail) < sizeof fail_name) {
    memcpy(fail_name, fail, (size_t)(eq - fail));
    fail_name[eq - fail] = '\0';
    fail_status = atoi(eq + 1);
  }
}

/* Takes the lock, logs the call and returns the injected failure for `name` (or success). */
#define ENTER(name, ...)                              \
  pthread_mutex_lock(&lock);                          \
  init_locked();                                      \
  log_line_locked(__VA_ARGS__);                       \
  if (fail_name[0] && strcmp(fail_name, name) == 0) { \
    pthread_mutex_unlock(&lock);                      \
    return fail_status;                               \
  }

static cudaError_t leave(cudaError_t status) {
  pthread_mutex_unlock(&lock);
  return status;
}

static void enqueue_locked(Op op) {
  Op* node = malloc(sizeof *node);
  *node = op;
  node->next = NULL;
  if (queue_tail)
    queue_tail->next = node;
  else
    queue_head = node;
  queue_tail = node;
}

/* Runs queued work in order, through `until` (NULL: all of it). */
static void run_locked(const Op* until) {
  while (queue_head) {
    Op* op = queue_head;
    queue_head = op->next;
    if (!queue_head) queue_tail = NULL;
    if (op->kind == kCopy) {
      if (op->bytes) memmove(op->dst, op->src, op->bytes);
    } else {
      if (--op->event->pending == 0 && op->event->destroyed) free(op->event);
    }
    int last = op == until;
    free(op);
    if (last) return;
  }
}

/* The event's latest queued record: waiting for the event waits for it. */
static const Op* record_op_locked(cudaEvent_t event) {
  const Op* found = NULL;
  for (const Op* op = queue_head; op; op = op->next)
    if (op->kind == kRecord && op->event == event) found = op;
  return found;
}

static void wait_unstuck_locked(void) {
  while (stuck) pthread_cond_wait(&unstuck, &lock);
}

static int queued_use_locked(const char* ptr) {
  for (const Op* op = queue_head; op; op = op->next) {
    if (op->kind != kCopy) continue;
    const char* dst = op->dst;
    const char* src = op->src;
    if (ptr == dst || ptr == src) return 1;
  }
  return 0;
}

/* ---- the CudaRuntime table ------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int* count) {
  ENTER("cudaGetDeviceCount", "cudaGetDeviceCount");
  *count = device_count;
  return leave(kSuccess);
}

cudaError_t cudaGetDevice(int* device) {
  ENTER("cudaGetDevice", "cudaGetDevice");
  *device = current_device;
  return leave(kSuccess);
}

cudaError_t cudaSetDevice(int device) {
  ENTER("cudaSetDevice", "cudaSetDevice device=%d", device);
  if (device < 0 || device >= device_count) return leave(kInvalidDevice);
  current_device = device;
  return leave(kSuccess);
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  ENTER("cudaMalloc", "cudaMalloc bytes=%zu", bytes);
  *ptr = malloc(bytes ? bytes : 1);
  return leave(*ptr ? kSuccess : kMemoryAllocation);
}

cudaError_t cudaFree(void* ptr) {
  ENTER("cudaFree", "cudaFree ptr=%llu", U(ptr));
  free(ptr);
  return leave(kSuccess);
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  ENTER("cudaHostAlloc", "cudaHostAlloc bytes=%zu flags=%u", bytes, flags);
  *ptr = malloc(bytes ? bytes : 1);
  return leave(*ptr ? kSuccess : kMemoryAllocation);
}

cudaError_t cudaFreeHost(void* ptr) {
  ENTER("cudaFreeHost", "cudaFreeHost ptr=%llu", U(ptr));
  if (queued_use_locked(ptr)) {
    log_line_locked("VIOLATION cudaFreeHost ptr=%llu while a queued copy uses it", U(ptr));
    return leave(kInvalidValue);
  }
  free(ptr);
  return leave(kSuccess);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int kind,
                            cudaStream_t stream) {
  ENTER("cudaMemcpyAsync", "cudaMemcpyAsync stream=%llu kind=%d bytes=%zu dst=%llu src=%llu",
        U(stream), kind, bytes, U(dst), U(src));
  if (kind < 0 || kind > 4) return leave(kInvalidValue);
  Op op = {kCopy, dst, src, bytes, NULL, NULL};
  enqueue_locked(op);
  return leave(kSuccess);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, int kind, cudaStream_t stream) {
  ENTER("cudaMemcpy2DAsync",
        "cudaMemcpy2DAsync stream=%llu kind=%d bytes=%zu rows=%zu dst=%llu src=%llu", U(stream),
        kind, width * height, height, U(dst), U(src));
  if (kind < 0 || kind > 4 || dpitch < width || spitch < width) return leave(kInvalidValue);
  for (size_t row = 0; row < height; ++row) {
    Op op = {kCopy, (char*)dst + row * dpitch, (const char*)src + row * spitch, width, NULL, NULL};
    enqueue_locked(op);
  }
  return leave(kSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  ENTER("cudaStreamSynchronize", "cudaStreamSynchronize stream=%llu", U(stream));
  wait_unstuck_locked();
  run_locked(NULL);
  return leave(kSuccess);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  ENTER("cudaStreamQuery", "cudaStreamQuery stream=%llu", U(stream));
  if (stuck && queue_head) return leave(kNotReady);
  run_locked(NULL);
  return leave(kSuccess);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  ENTER("cudaStreamWaitEvent", "cudaStreamWaitEvent stream=%llu event=%llu flags=%u", U(stream),
        U(event), flags);
  if (!event) return leave(kInvalidResourceHandle);
  return leave(kSuccess); /* the one FIFO already runs the event's work first */
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  ENTER("cudaEventCreateWithFlags", "cudaEventCreateWithFlags flags=%u", flags);
  *event = calloc(1, sizeof **event);
  return leave(*event ? kSuccess : kMemoryAllocation);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  ENTER("cudaEventRecord", "cudaEventRecord event=%llu stream=%llu", U(event), U(stream));
  if (!event) return leave(kInvalidResourceHandle);
  event->pending++;
  Op op = {kRecord, NULL, NULL, 0, event, NULL};
  enqueue_locked(op);
  return leave(kSuccess);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  ENTER("cudaEventQuery", "cudaEventQuery event=%llu", U(event));
  if (!event) return leave(kInvalidResourceHandle);
  if (!event->pending) return leave(kSuccess);
  if (stuck) return leave(kNotReady);
  run_locked(record_op_locked(event));
  return leave(kSuccess);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  ENTER("cudaEventSynchronize", "cudaEventSynchronize event=%llu", U(event));
  if (!event) return leave(kInvalidResourceHandle);
  if (event->pending) {
    wait_unstuck_locked();
    run_locked(record_op_locked(event));
  }
  return leave(kSuccess);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  ENTER("cudaEventDestroy", "cudaEventDestroy event=%llu", U(event));
  if (!event) return leave(kInvalidResourceHandle);
  if (record_op_locked(event)) {
    /* CUDA lets a pending event be destroyed; its record still runs, so free it after. */
    event->destroyed = 1;
    return leave(kSuccess);
  }
  free(event);
  return leave(kSuccess);
}

const char* cudaGetErrorString(cudaError_t status) {
  switch (status) {
    case kSuccess:
      return "no error";
    case kInvalidValue:
      return "invalid argument";
    case kMemoryAllocation:
      return "out of memory";
    case kInvalidDevice:
      return "invalid device ordinal";
    case kInvalidResourceHandle:
      return "invalid resource handle";
    case kNotReady:
      return "device not ready";
    case 700:
      return "an illegal memory access was encountered";
    default:
      return "unknown error (fake runtime)";
  }
}

/* ---- test switches --------------------------------------------------------------------- */

void fake_cudart_set_stuck(int value) {
  pthread_mutex_lock(&lock);
  init_locked();
  stuck = value;
  pthread_cond_broadcast(&unstuck);
  pthread_mutex_unlock(&lock);
}

void fake_cudart_fail(const char* name, int status) {
  pthread_mutex_lock(&lock);
  init_locked();
  fail_name[0] = '\0';
  if (name) snprintf(fail_name, sizeof fail_name, "%s", name);
  fail_status = status;
  pthread_mutex_unlock(&lock);
}

size_t fake_cudart_read_log(char* out, size_t capacity) {
  pthread_mutex_lock(&lock);
  size_t size = log_read_locked(out, capacity);
  pthread_mutex_unlock(&lock);
  return size;
}

void fake_cudart_reset(void) {
  pthread_mutex_lock(&lock);
  log_clear_locked();
  pthread_mutex_unlock(&lock);
}
