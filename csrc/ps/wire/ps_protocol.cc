#include "ps/wire/ps_protocol.h"

namespace pscore::ps {

const char* msg_type_name(uint8_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kHello:
      return "hello";
    case MsgType::kChallenge:
      return "challenge";
    case MsgType::kAuth:
      return "auth";
    case MsgType::kWelcome:
      return "welcome";
    case MsgType::kCreateTable:
      return "create_table";
    case MsgType::kLookupTable:
      return "lookup_table";
    case MsgType::kCreatePart:
      return "create_part";
    case MsgType::kListTables:
      return "list_tables";
    case MsgType::kDropTable:
      return "drop_table";
    case MsgType::kTableStatus:
      return "table_status";
    case MsgType::kPushDense:
      return "push";
    case MsgType::kPullDense:
      return "pull";
    case MsgType::kPushPullDense:
      return "push_pull";
    case MsgType::kAssignDense:
      return "assign";
    case MsgType::kPushSparse:
      return "push_sparse";
    case MsgType::kPullSparse:
      return "pull_sparse";
    case MsgType::kPushPullSparse:
      return "push_pull_sparse";
    case MsgType::kWorkerDone:
      return "worker_done";
    case MsgType::kGlobalStep:
      return "global_step";
    case MsgType::kSave:
      return "save";
    case MsgType::kLoad:
      return "load";
    case MsgType::kStats:
      return "stats";
    case MsgType::kPing:
      return "ping";
    case MsgType::kReply:
      return "reply";
    case MsgType::kError:
      return "error";
  }
  return "unknown";
}

}  // namespace pscore::ps
