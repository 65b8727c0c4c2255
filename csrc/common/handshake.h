// The one authentication exchange every pscore server runs (common/auth.h proofs), independent
// of how each protocol frames it: the client's hello says whether it authenticates and carries
// its nonce; a server with a token answers with its nonce and proof, the client checks that proof
// and answers with its own, and the server checks it before serving. A server without a token
// serves right after the hello. The refusal messages are the same for every server.
#pragma once

#include <string>

#include "common/auth.h"

namespace pscore::auth {

// "<server> requires authentication: set PSCORE_AUTH_TOKEN (or PSCORE_AUTH_TOKEN_FILE) ..."
std::string requires_token_message(const std::string& server);
// "<server> has no auth token, but the client has one ..."
std::string unexpected_token_message(const std::string& server);
// "wrong token: the client's proof does not match <server>'s token"
std::string wrong_token_message(const std::string& server);

// The server's side of one connection: a non-blocking state machine fed the hello and the proof
// as they arrive. Not thread-safe (one connection is handled by one thread at a time).
class ServerHandshake {
 public:
  enum class State { kAwaitingHello, kAwaitingProof, kDone };
  struct Verdict {
    bool accepted = true;  // false: send `refusal` and close
    std::string refusal;
  };

  // `server` names the server in refusals ("this store", "parameter server shard 0").
  ServerHandshake(std::string token, Binding binding, std::string server);

  // A hello from a client that does (not) authenticate. Accepted with a token: send challenge
  // (server_nonce(), server_proof()) and wait for the proof; accepted without: done.
  Verdict on_hello(bool client_authenticates, const Nonce& client_nonce);
  // The client's proof (any length; a wrong one is refused as a wrong token).
  Verdict on_proof(const void* proof, size_t nbytes);

  State state() const { return state_; }
  bool authenticates() const { return !token_.empty(); }
  const Nonce& server_nonce() const { return server_nonce_; }
  const Proof& server_proof() const { return server_proof_; }

 private:
  std::string token_;
  Binding binding_;
  std::string server_;
  State state_ = State::kAwaitingHello;
  Nonce server_nonce_{};
  Nonce client_nonce_{};
  Proof server_proof_{};
};

// The client's answer to a challenge: checks that the server's proof matches `token` (throws
// pscore::Error "<server> could not prove it knows this process's token" when not) and returns
// the client's proof.
Proof answer_challenge(const std::string& token, const Nonce& client_nonce,
                       const Nonce& server_nonce, const Proof& server_proof, const Binding& binding,
                       const std::string& server);

}  // namespace pscore::auth
