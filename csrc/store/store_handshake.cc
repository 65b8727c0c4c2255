#include "store/store_handshake.h"

#include <string_view>

#include "common/error.h"
#include "common/handshake.h"

namespace pscore {

using store_wire::Op;

namespace {

template <size_t N>
std::string_view as_bytes(const std::array<uint8_t, N>& a) {
  return {reinterpret_cast<const char*>(a.data()), N};
}

// Reads a byte string that must be exactly out.size() bytes.
template <size_t N>
void read_exact(WireReader& in, std::array<uint8_t, N>& out, const char* field) {
  const uint32_t n = in.u32(field);
  if (n != N)
    in.fail(std::string(field) + " of " + std::to_string(n) + " bytes, expected " +
            std::to_string(N));
  in.copy_to(out.data(), N, field);
}

auth::Binding binding(const StoreAuthOptions& o) { return {o.job_id, kStoreAuthContext}; }

StoreServerHandshake::Step refuse(const std::string& message) {
  return {StoreServerHandshake::Action::kRefuse, message, true};
}

// How refusals name the store (common/handshake.h).
const char* const kStoreName = "this store";

}  // namespace

std::string encode_hello(const StoreHello& hello) {
  WireWriter<> w;
  w.u32(hello.version).u8(hello.authenticate ? kHelloAuthenticate : 0);
  w.string(hello.authenticate ? as_bytes(hello.client_nonce) : std::string_view(), "nonce");
  w.string(hello.job_id, "job id");
  return w.take();
}

StoreHello decode_hello(const std::string& payload, const std::string& peer) {
  WireReader in(payload.data(), payload.size(), peer);
  StoreHello h;
  h.version = in.u32("version");
  h.authenticate = (in.u8("flags") & kHelloAuthenticate) != 0;
  if (h.authenticate) {
    read_exact(in, h.client_nonce, "client nonce");
  } else if (in.u32("client nonce") != 0) {
    throw NetworkError(peer + ": a nonce in a hello that does not authenticate");
  }
  h.job_id = in.string("job id");
  in.finish();
  return h;
}

std::string encode_challenge(const StoreChallenge& c) {
  WireWriter<> w;
  w.u8(c.authenticate ? 1 : 0);
  if (c.authenticate) w.string(as_bytes(c.server_nonce)).string(as_bytes(c.server_proof));
  return w.take();
}

StoreChallenge decode_challenge(const std::string& payload, const std::string& peer) {
  WireReader in(payload.data(), payload.size(), peer);
  StoreChallenge c;
  c.authenticate = in.u8("authenticates") != 0;
  if (c.authenticate) {
    read_exact(in, c.server_nonce, "server nonce");
    read_exact(in, c.server_proof, "server proof");
  }
  in.finish();
  return c;
}

StoreServerHandshake::Step StoreServerHandshake::on_frame(const StoreAuthOptions& server,
                                                          const FrameHeader& h,
                                                          const std::string& payload,
                                                          const std::string& peer) {
  bool handshake_op =
      h.type == static_cast<uint8_t>(Op::kHello) || h.type == static_cast<uint8_t>(Op::kAuth);
  switch (state_) {
    case State::kReady:
      if (handshake_op) throw NetworkError(peer + ": a handshake frame after the handshake");
      return {Action::kServe, "", false};
    case State::kFresh:
      if (h.type == static_cast<uint8_t>(Op::kHello)) return on_hello(server, payload, peer);
      if (h.type == static_cast<uint8_t>(Op::kAuth))
        throw NetworkError(peer + ": a proof before the hello");
      if (!server.token.empty()) return refuse(auth::requires_token_message(kStoreName));
      state_ = State::kReady;  // a client that skips the hello, on a store with no token
      return {Action::kServe, "", false};
    case State::kAwaitingProof:
      if (h.type != static_cast<uint8_t>(Op::kAuth))
        throw NetworkError(peer + ": sent op " + std::to_string(h.type) + " instead of its proof");
      return on_proof(server, payload, peer);
  }
  return {Action::kServe, "", false};
}

StoreServerHandshake::Step StoreServerHandshake::on_hello(const StoreAuthOptions& server,
                                                          const std::string& payload,
                                                          const std::string& peer) {
  StoreHello hello = decode_hello(payload, peer);
  if (hello.version != kStoreHandshakeVersion)
    return refuse("handshake version " + std::to_string(hello.version) + ", this store speaks " +
                  std::to_string(kStoreHandshakeVersion) + " (mixed pscore versions?)");
  if (!server.token.empty() && hello.authenticate && hello.job_id != server.job_id)
    return refuse("the client belongs to job '" + hello.job_id + "', this store serves job '" +
                  server.job_id + "' (PSCORE_JOB_ID differs)");
  auth_.emplace(server.token, binding(server), kStoreName);
  auth::ServerHandshake::Verdict v = auth_->on_hello(hello.authenticate, hello.client_nonce);
  if (!v.accepted) return refuse(v.refusal);
  StoreChallenge c;
  c.authenticate = auth_->authenticates();
  c.server_nonce = auth_->server_nonce();
  c.server_proof = auth_->server_proof();
  state_ = c.authenticate ? State::kAwaitingProof : State::kReady;
  return {Action::kReply, encode_challenge(c), false};
}

StoreServerHandshake::Step StoreServerHandshake::on_proof(const StoreAuthOptions& server,
                                                          const std::string& payload,
                                                          const std::string& peer) {
  WireReader in(payload.data(), payload.size(), peer);
  std::string proof = in.string("client proof");
  in.finish();
  auth::ServerHandshake::Verdict v = auth_->on_proof(proof.data(), proof.size());
  if (!v.accepted) return refuse(v.refusal);
  state_ = State::kReady;
  return {Action::kReply, "", false};
}

}  // namespace pscore
