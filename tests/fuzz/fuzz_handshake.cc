// The shared authentication exchange (common/handshake.h) fed a client's hello and proof, and
// the parameter server's framing of it: its hello, challenge and welcome decoders.
#include <algorithm>
#include <cstring>

#include "common/handshake.h"
#include "fuzz_support.h"
#include "ps/wire/ps_handshake.h"

using namespace pscore;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_documented_errors([&] { ps::decode_hello(data, size); });
  fuzz::expect_documented_errors([&] { ps::decode_challenge(data, size); });
  fuzz::expect_documented_errors([&] { ps::decode_welcome(data, size); });
  // First byte: whether the client authenticates; then its nonce; the rest is its proof.
  if (size < 1 + auth::kNonceBytes) return 0;
  auth::Nonce client_nonce;
  std::memcpy(client_nonce.data(), data + 1, auth::kNonceBytes);
  const uint8_t* proof = data + 1 + auth::kNonceBytes;
  const size_t proof_bytes = size - 1 - auth::kNonceBytes;
  for (const char* token : {"", "fuzz-token"}) {
    fuzz::expect_documented_errors([&] {
      auth::ServerHandshake hs(token, auth::Binding{"job", "fuzz"}, "fuzz server");
      const auto hello = hs.on_hello(data[0] & 1, client_nonce);
      if (hello.accepted && hs.state() == auth::ServerHandshake::State::kAwaitingProof) {
        const auto verdict = hs.on_proof(proof, proof_bytes);
        fuzz::require(!verdict.accepted, "a random proof was accepted");
      }
    });
  }
  return 0;
}
