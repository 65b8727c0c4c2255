#include "collectives/message.h"

namespace pscore {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kAllreduce:
      return "allreduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllgather:
      return "allgather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kGather:
      return "gather";
    case OpKind::kScatter:
      return "scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kSend:
      return "send/recv";
  }
  return "unknown op";
}

}  // namespace pscore
