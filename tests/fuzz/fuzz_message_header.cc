// The 32-byte header in front of every collective and point-to-point message, judged against
// the message this rank expects (the first 32 input bytes are received, the next 32 expected).
#include <cstring>

#include "collectives/message.h"
#include "fuzz_support.h"

using namespace pscore;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 * sizeof(MessageHeader)) return 0;
  MessageHeader received, expected;
  std::memcpy(&received, data, sizeof received);
  std::memcpy(&expected, data + sizeof received, sizeof expected);
  const std::string why = message_header_mismatch(received, expected);
  const bool same = received.magic == kMessageMagic && received.op == expected.op &&
                    received.seq == expected.seq && received.dtype == expected.dtype &&
                    received.nbytes == expected.nbytes && received.tag == expected.tag;
  fuzz::require(why.empty() == same, "a header judged against the wrong fields");
  return 0;
}
