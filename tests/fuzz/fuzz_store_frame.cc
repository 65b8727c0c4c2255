// The TCP store's bytes from a client or server: a frame header (validated the way both ends do
// before allocating a payload), then its payload through the server's handshake state machine,
// the hello and challenge decoders and the key-list reader.
#include <cstring>
#include <string>

#include "common/frame.h"
#include "fuzz_support.h"
#include "store/store_handshake.h"
#include "store/store_protocol.h"

using namespace pscore;

namespace {

void decode_payload(const FrameHeader& h, const std::string& payload) {
  const std::string peer = "fuzz peer";
  fuzz::expect_documented_errors([&] { decode_hello(payload, peer); });
  fuzz::expect_documented_errors([&] { decode_challenge(payload, peer); });
  fuzz::expect_documented_errors([&] {
    WireReader r(payload.data(), payload.size(), peer);
    store_wire::read_keys(r, "keys");
    r.finish();
  });
  // The server's side: the first frame with and without a token, then (when it asked for a
  // proof) the same payload as the proof.
  for (const char* token : {"", "fuzz-token"}) {
    fuzz::expect_documented_errors([&] {
      StoreServerHandshake hs;
      StoreAuthOptions server{token, "job"};
      hs.on_frame(server, h, payload, peer);
      if (hs.state() == StoreServerHandshake::State::kAwaitingProof) {
        FrameHeader proof = h;
        proof.type = static_cast<uint8_t>(store_wire::Op::kAuth);
        hs.on_frame(server, proof, payload, peer);
      }
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FrameHeader h;
  if (size < sizeof h) return 0;
  std::memcpy(&h, data, sizeof h);
  const std::string payload(reinterpret_cast<const char*>(data + sizeof h), size - sizeof h);
  bool valid = false;
  fuzz::expect_documented_errors([&] {
    validate_frame(h, store_wire::kMaxPayloadBytes, "fuzz peer");
    valid = true;
  });
  if (valid) decode_payload(h, payload);
  return 0;
}
