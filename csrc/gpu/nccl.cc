#include "gpu/nccl.h"

#include <stdexcept>

#include "common/error.h"
#include "gpu/dynamic_library.h"

namespace pscore::gpu {

namespace {

// ncclDataType_t and ncclRedOp_t codes of NCCL's public API.
constexpr NcclDataType kNcclInt8 = 0, kNcclUint8 = 1, kNcclInt32 = 2, kNcclInt64 = 4,
                       kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclFloat64 = 8, kNcclBfloat16 = 9;
constexpr NcclRedOp kNcclSum = 0, kNcclProd = 1, kNcclMax = 2, kNcclMin = 3, kNcclAvg = 4;
constexpr int kVersion2_10 = 21000;  // bfloat16 and ncclAvg arrived in 2.10

Nccl bind(const DynamicLibrary& lib) {
  Nccl api;
  api.path = lib.path();
  bind_symbol(lib, api.ncclGetVersion, "ncclGetVersion");
  bind_symbol(lib, api.ncclGetUniqueId, "ncclGetUniqueId");
  bind_symbol(lib, api.ncclCommInitRank, "ncclCommInitRank");
  bind_symbol(lib, api.ncclCommAbort, "ncclCommAbort");
  bind_symbol(lib, api.ncclCommDestroy, "ncclCommDestroy");
  bind_symbol(lib, api.ncclCommGetAsyncError, "ncclCommGetAsyncError");
  bind_symbol(lib, api.ncclGetErrorString, "ncclGetErrorString");
  bind_symbol(lib, api.ncclAllReduce, "ncclAllReduce");
  bind_symbol(lib, api.ncclBroadcast, "ncclBroadcast");
  bind_symbol(lib, api.ncclReduce, "ncclReduce");
  bind_symbol(lib, api.ncclAllGather, "ncclAllGather");
  bind_symbol(lib, api.ncclReduceScatter, "ncclReduceScatter");
  bind_symbol(lib, api.ncclSend, "ncclSend");
  bind_symbol(lib, api.ncclRecv, "ncclRecv");
  bind_symbol(lib, api.ncclGroupStart, "ncclGroupStart");
  bind_symbol(lib, api.ncclGroupEnd, "ncclGroupEnd");
  api.check(api.ncclGetVersion(&api.version_code), "ncclGetVersion");
  return api;
}

LazyLibrary<Nccl> library("NCCL (libnccl)", {"libnccl.so.2", "libnccl.so"}, bind);

}  // namespace

void Nccl::check(NcclResult result, const std::string& what) const {
  if (result == kNcclSuccess) return;
  const char* message = ncclGetErrorString(result);
  throw Error(what + ": " + (message ? message : "unknown error") + " (NCCL error " +
              std::to_string(result) + ")");
}

std::string Nccl::version() const {
  // Codes are major*10000 + minor*100 + patch since 2.9, major*1000 + minor*100 + patch before.
  const int major_unit = version_code >= 20900 ? 10000 : 1000;
  const int major = version_code / major_unit, rest = version_code % major_unit;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." +
         std::to_string(rest % 100);
}

NcclDataType Nccl::dtype(DType dtype, const std::string& what) const {
  switch (dtype) {
    case DType::kFloat16:
      return kNcclFloat16;
    case DType::kFloat32:
      return kNcclFloat32;
    case DType::kFloat64:
      return kNcclFloat64;
    case DType::kInt8:
      return kNcclInt8;
    case DType::kUInt8:
      return kNcclUint8;
    case DType::kInt32:
      return kNcclInt32;
    case DType::kInt64:
      return kNcclInt64;
    case DType::kBFloat16:
      if (version_code >= kVersion2_10) return kNcclBfloat16;
      throw std::invalid_argument(what + ": NCCL " + version() +
                                  " has no bfloat16 (it arrived in 2.10); use float16 or float32");
  }
  throw std::invalid_argument(what + ": dtype code " + std::to_string(int(dtype)) +
                              " has no NCCL equivalent");
}

NcclRedOp Nccl::op(ReduceOp op, const std::string& what) const {
  switch (op) {
    case ReduceOp::kSum:
      return kNcclSum;
    case ReduceOp::kProd:
      return kNcclProd;
    case ReduceOp::kMin:
      return kNcclMin;
    case ReduceOp::kMax:
      return kNcclMax;
    case ReduceOp::kAvg:
      if (version_code >= kVersion2_10) return kNcclAvg;
      throw std::invalid_argument(what + ": NCCL " + version() +
                                  " has no avg (it arrived in 2.10); sum, then divide");
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      break;
  }
  throw std::invalid_argument(what + ": NCCL has no " + reduce_op_name(op) +
                              " reduction; use sum, prod, min, max or avg on CUDA tensors, or "
                              "a CPU tensor");
}

void set_nccl_candidates(std::vector<std::string> paths) {
  library.set_candidates(std::move(paths));
}

const Nccl& nccl() { return library.get(); }

}  // namespace pscore::gpu
