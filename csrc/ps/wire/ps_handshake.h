// How the parameter server frames the shared authentication exchange (common/handshake.h):
// client kHello {version, worker, authenticates, nonce, job id}; a server with a token answers
// kChallenge {nonce, proof}, the client checks it and sends kAuth {proof}; the server ends with
// kWelcome {shard, shards, workers, incarnation}, or with a kError frame naming the refusal.
// A server without a token answers the hello with kWelcome. Both proofs are bound to the job id
// and the worker id. docs/wire.md has the byte layouts.
#pragma once

#include <cstdint>
#include <string>

#include "common/auth.h"
#include "common/clock.h"
#include "common/socket.h"

namespace pscore::ps {

struct Hello {
  uint32_t version = 0;
  int32_t worker = 0;
  bool authenticate = false;
  auth::Nonce client_nonce{};  // only when authenticate
  std::string job_id;
};

struct Challenge {
  auth::Nonce server_nonce{};
  auth::Proof server_proof{};
};

struct Welcome {
  int32_t shard = 0;
  int32_t num_shards = 0;
  int32_t num_workers = 0;
  uint64_t incarnation = 0;  // changes every time the server starts
};

// What the proofs of a connection are bound to besides the nonces.
auth::Binding handshake_binding(const std::string& job_id, int32_t worker);
// How refusals name the server.
constexpr const char* kServerName = "this parameter server";

// Encoders and decoders; decoders throw NetworkError naming `what` on a malformed body.
std::string encode_hello(const Hello& h);
Hello decode_hello(const uint8_t* p, size_t n);
std::string encode_challenge(const Challenge& c);
Challenge decode_challenge(const uint8_t* p, size_t n);
std::string encode_welcome(const Welcome& w);
Welcome decode_welcome(const uint8_t* p, size_t n);

struct ClientHandshake {
  int worker = 0;
  std::string job_id;
  std::string token;
  std::string peer;  // names the server in errors ("shard 1 (127.0.0.1:7164)")
};

// Runs the client side on a connected blocking socket. Throws Error when the server refuses the
// worker (no token, wrong token, job id or worker id) or cannot prove it knows the token,
// NetworkError when the connection breaks, TimeoutError past the deadline.
Welcome client_handshake(const Socket& s, const ClientHandshake& opts, const Deadline& deadline);

}  // namespace pscore::ps
