// The parameter server's wire protocol: message types carried in FrameHeader::type, the fixed
// request/reply prefixes, and error codes. Frames: header.seq = request id (replies echo it),
// header.tag = table id, header.flags = the request type (echoed in replies).
//
// A connection opens with the handshake of ps_handshake.h (the shared exchange of
// common/handshake.h). Until kWelcome, frames above kMaxHandshakeBytes or of any other type drop
// the connection. docs/wire.md has every frame.
#pragma once

#include <cstdint>
#include <stdexcept>

namespace pscore::ps {

// A request named a table the shard does not hold (the server's reply status kTableNotFound;
// the client raises it as KeyError).
class TableNotFound : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

constexpr uint32_t kProtocolVersion = 2;  // 2: the shared handshake
constexpr uint64_t kMaxHandshakeBytes = 4096;

enum class MsgType : uint8_t {
  kHello = 1,
  kChallenge = 2,
  kAuth = 3,
  kWelcome = 4,
  kCreateTable = 10,  // catalog (shard 0): spec -> layout
  kLookupTable = 11,  // catalog (shard 0): name -> layout
  kCreatePart = 12,   // layout + optional initial values -> this shard's part exists
  kListTables = 13,   // catalog (shard 0): -> count + every layout
  kDropTable = 14,    // every shard: name -> its part (and on shard 0 the entry) removed
  kTableStatus = 15,  // a table's consistency state on this shard, as JSON
  kPushDense = 20,
  kPullDense = 21,
  kPushPullDense = 22,
  kAssignDense = 23,
  kPushSparse = 30,
  kPullSparse = 31,
  kPushPullSparse = 32,
  kWorkerDone = 40,
  kGlobalStep = 41,
  kSave = 42,
  kLoad = 43,
  kStats = 44,
  kPing = 45,
  kReply = 100,
  kError = 101,
};

enum class ErrorCode : uint32_t {
  kInvalidArgument = 1,  // the client raises std::invalid_argument (Python ValueError)
  kNotFound = 2,
  kInternal = 3,
  kShuttingDown = 4,
};

#pragma pack(push, 1)
// Precedes the gradient of kPushDense / kPushPullDense / kPushSparse.
struct PushHeader {
  int32_t worker = 0;
  uint32_t reserved = 0;
  uint64_t seq = 0;          // per (worker, table), strictly increasing; retries reuse it
  int64_t step = 0;          // the worker's step for this table (sync rounds, ssp clocks)
  float clip_factor = 1.0f;  // clip_grad_norm_ factor the client computed on the whole gradient
  uint32_t reserved2 = 0;
};
// Opens the reply to a push; kPushPullDense appends the partition's values.
struct PushReply {
  uint8_t status = 0;  // PushStatus
  uint8_t reserved[7] = {0};
  int64_t progress = 0;  // sync: the open round after this push; ssp: the worker's clock
};
#pragma pack(pop)
static_assert(sizeof(PushHeader) == 32, "push header is 32 bytes");
static_assert(sizeof(PushReply) == 16, "push reply is 16 bytes");

const char* msg_type_name(uint8_t type);

}  // namespace pscore::ps
