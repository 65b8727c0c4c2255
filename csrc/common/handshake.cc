#include "common/handshake.h"

#include <utility>

#include "common/error.h"

namespace pscore::auth {

std::string requires_token_message(const std::string& server) {
  return server +
         " requires authentication: set PSCORE_AUTH_TOKEN (or PSCORE_AUTH_TOKEN_FILE) to its "
         "secret";
}

std::string unexpected_token_message(const std::string& server) {
  return server +
         " has no auth token, but the client has one (set PSCORE_AUTH_TOKEN on both sides, or "
         "on neither)";
}

std::string wrong_token_message(const std::string& server) {
  return "wrong token: the client's proof does not match " + server + "'s token";
}

ServerHandshake::ServerHandshake(std::string token, Binding binding, std::string server)
    : token_(std::move(token)), binding_(std::move(binding)), server_(std::move(server)) {}

ServerHandshake::Verdict ServerHandshake::on_hello(bool client_authenticates,
                                                   const Nonce& client_nonce) {
  if (state_ != State::kAwaitingHello) throw NetworkError("a second hello");
  if (token_.empty()) {
    if (client_authenticates) return {false, unexpected_token_message(server_)};
    state_ = State::kDone;
    return {};
  }
  if (!client_authenticates) return {false, requires_token_message(server_)};
  client_nonce_ = client_nonce;
  server_nonce_ = random_nonce();
  server_proof_ = auth::server_proof(token_, server_nonce_, client_nonce_, binding_);
  state_ = State::kAwaitingProof;
  return {};
}

ServerHandshake::Verdict ServerHandshake::on_proof(const void* proof, size_t nbytes) {
  if (state_ != State::kAwaitingProof) throw NetworkError("a proof the server did not ask for");
  Proof expected = client_proof(token_, server_nonce_, client_nonce_, binding_);
  if (!proof_matches(expected, proof, nbytes)) return {false, wrong_token_message(server_)};
  state_ = State::kDone;
  return {};
}

Proof answer_challenge(const std::string& token, const Nonce& client_nonce,
                       const Nonce& server_nonce, const Proof& server_proof_received,
                       const Binding& binding, const std::string& server) {
  Proof expected = server_proof(token, server_nonce, client_nonce, binding);
  if (!proof_matches(expected, server_proof_received.data(), server_proof_received.size()))
    throw Error(server + " could not prove it knows this process's token");
  return client_proof(token, server_nonce, client_nonce, binding);
}

}  // namespace pscore::auth
