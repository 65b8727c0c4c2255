#include "store/store_protocol.h"

namespace pscore::store_wire {

const char* op_name(Op op) {
  switch (op) {
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kAdd:
      return "add";
    case Op::kCompareSet:
      return "compare_set";
    case Op::kWait:
      return "wait";
    case Op::kCheck:
      return "check";
    case Op::kDelete:
      return "delete_key";
    case Op::kNumKeys:
      return "num_keys";
    case Op::kHello:
      return "hello";
    case Op::kAuth:
      return "auth";
  }
  return "unknown op";
}

void write_keys(WireWriter<>& w, const std::vector<std::string>& keys) {
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.string(k, "store: key", kMaxPayloadBytes);
}

std::vector<std::string> read_keys(WireReader& r, const char* field) {
  const uint32_t n = r.u32(field);
  // Each key takes at least its 4-byte length, which bounds n before reserving.
  if (n > r.remaining() / 4)
    r.fail(std::string(field) + ": " + std::to_string(n) + " keys cannot fit in the " +
           std::to_string(r.remaining()) + " bytes left");
  std::vector<std::string> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(r.string(field));
  return out;
}

std::string encode_frame(uint8_t type, uint64_t seq, const std::string& payload) {
  FrameHeader h;
  h.type = type;
  h.seq = seq;
  h.length = payload.size();
  std::string out;
  out.reserve(sizeof(h) + payload.size());
  WireWriter(out).record(h).bytes(payload.data(), payload.size());
  return out;
}

}  // namespace pscore::store_wire
