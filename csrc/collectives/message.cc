#include "collectives/message.h"

#include <string>

namespace pscore {

bool reduces(OpKind k) {
  return k == OpKind::kAllreduce || k == OpKind::kReduce || k == OpKind::kReduceScatter;
}

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

std::string message_header_mismatch(const MessageHeader& h, const MessageHeader& want) {
  if (h.magic != kMessageMagic)
    return "stream out of step (bad message magic); the group is broken";
  if (h.op != want.op || h.seq != want.seq)
    return "ranks disagree on the operation: the peer sent " +
           std::string(op_kind_name(static_cast<OpKind>(h.op))) + " #" + std::to_string(h.seq);
  if (h.dtype != want.dtype)
    return "dtype mismatch: the peer sent " + std::string(dtype_name(static_cast<DType>(h.dtype))) +
           ", this rank has " + dtype_name(static_cast<DType>(want.dtype));
  if (h.nbytes != want.nbytes)
    return "size mismatch: the peer sent " + std::to_string(h.nbytes) +
           " bytes, this rank expects " + std::to_string(want.nbytes);
  if (h.tag != want.tag)
    return "tag mismatch: the peer sent tag " + std::to_string(h.tag) + ", this rank expects " +
           std::to_string(want.tag);
  return "";
}

}  // namespace pscore
