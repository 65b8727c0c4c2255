// NCCL (libnccl.so.2), loaded at run time on first use: the table of the entry points pscore
// calls, with the types and codes of NCCL's public API (nccl.h) declared here, so pscore builds
// without NCCL and imports where it is missing. Also maps pscore's dtypes and reductions onto
// NCCL's.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "gpu/cuda_runtime.h"

namespace pscore::gpu {

using NcclResult = int;    // ncclResult_t
using NcclComm = void*;    // ncclComm_t
using NcclDataType = int;  // ncclDataType_t
using NcclRedOp = int;     // ncclRedOp_t

inline constexpr NcclResult kNcclSuccess = 0;
inline constexpr NcclResult kNcclInProgress = 7;  // ncclInProgress (2.14+)
inline constexpr size_t kNcclUniqueIdBytes = 128;

struct NcclUniqueId {
  char internal[kNcclUniqueIdBytes];
};

struct Nccl {
  std::string path;  // the file it was loaded from
  NcclResult (*ncclGetVersion)(int* version);
  NcclResult (*ncclGetUniqueId)(NcclUniqueId* id);
  NcclResult (*ncclCommInitRank)(NcclComm* comm, int nranks, NcclUniqueId id, int rank);
  NcclResult (*ncclCommAbort)(NcclComm comm);
  NcclResult (*ncclCommDestroy)(NcclComm comm);
  NcclResult (*ncclCommGetAsyncError)(NcclComm comm, NcclResult* async_error);
  const char* (*ncclGetErrorString)(NcclResult result);
  NcclResult (*ncclAllReduce)(const void* send, void* recv, size_t count, NcclDataType dtype,
                              NcclRedOp op, NcclComm comm, CudaStream stream);
  NcclResult (*ncclBroadcast)(const void* send, void* recv, size_t count, NcclDataType dtype,
                              int root, NcclComm comm, CudaStream stream);
  NcclResult (*ncclReduce)(const void* send, void* recv, size_t count, NcclDataType dtype,
                           NcclRedOp op, int root, NcclComm comm, CudaStream stream);
  NcclResult (*ncclAllGather)(const void* send, void* recv, size_t send_count, NcclDataType dtype,
                              NcclComm comm, CudaStream stream);
  NcclResult (*ncclReduceScatter)(const void* send, void* recv, size_t recv_count,
                                  NcclDataType dtype, NcclRedOp op, NcclComm comm,
                                  CudaStream stream);
  NcclResult (*ncclSend)(const void* send, size_t count, NcclDataType dtype, int peer,
                         NcclComm comm, CudaStream stream);
  NcclResult (*ncclRecv)(void* recv, size_t count, NcclDataType dtype, int peer, NcclComm comm,
                         CudaStream stream);
  NcclResult (*ncclGroupStart)();
  NcclResult (*ncclGroupEnd)();

  // pscore::Error "<what>: <NCCL's message> (NCCL error N)" unless result is success.
  void check(NcclResult result, const std::string& what) const;
  int version_code = 0;  // ncclGetVersion's: 22105 for 2.21.5 (1000s before 2.9)
  // "2.21.5".
  std::string version() const;

  // NCCL's code for a pscore dtype; std::invalid_argument naming `what` when this NCCL lacks
  // it (bfloat16 before 2.10).
  NcclDataType dtype(DType dtype, const std::string& what) const;
  // NCCL's code for a reduction; std::invalid_argument naming `what` for those NCCL lacks
  // (band, bor, bxor; avg before 2.10).
  NcclRedOp op(ReduceOp op, const std::string& what) const;
};

// Where NCCL may be loaded from, in order (paths or sonames); Python sets them
// (pscore/cuda_libraries.py) before the first load. Default: the system's libnccl.so.2.
void set_nccl_candidates(std::vector<std::string> candidates);

// NCCL, loaded from the first candidate that opens on the first call. pscore::Error listing
// every candidate tried when none loads (then again on each call until the candidates change).
const Nccl& nccl();

}  // namespace pscore::gpu
