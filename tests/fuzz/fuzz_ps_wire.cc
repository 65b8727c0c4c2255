// The parameter server's table specs and layouts as they arrive in kCreateTable / kCreatePart /
// kLookupTable frames, the frame header in front of them, and the frozen format-1 decoder of
// the layouts old checkpoints and logs hold. A spec that decodes must also survive validation
// and re-encode to as many bytes.
#include <cstring>

#include "common/frame.h"
#include "fuzz_support.h"
#include "ps/durability/checkpoint_legacy_v1.h"
#include "ps/wire/ps_protocol.h"
#include "ps/wire/table_spec.h"

using namespace pscore;
using namespace pscore::ps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= sizeof(FrameHeader)) {
    FrameHeader h;
    std::memcpy(&h, data, sizeof h);
    fuzz::expect_documented_errors([&] { validate_frame(h, 1ull << 30, "fuzz peer"); });
    msg_type_name(h.type);
  }
  fuzz::expect_documented_errors([&] {
    WireReader r(data, size, "fuzz spec");
    TableSpec spec = decode_spec(r);
    const size_t used = r.position();
    ByteBuffer again;
    WireWriter<ByteBuffer&> w(again);
    encode_spec(w, spec);
    fuzz::require(again.size() == used, "a decoded spec re-encodes to another length");
    spec.validate(4);
    spec.settings();
  });
  fuzz::expect_documented_errors([&] {
    WireReader r(data, size, "fuzz layout");
    TableLayout layout = decode_layout(r);
    layout.spec.describe_differences(TableSpec{});
  });
  fuzz::expect_documented_errors([&] {
    size_t used = 0;
    legacy_v1::decode_layout_prefix(data, size, &used, "fuzz v1 layout");
    fuzz::require(used <= size, "the v1 decoder used more bytes than it had");
  });
  return 0;
}
