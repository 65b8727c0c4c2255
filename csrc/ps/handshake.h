// The ps connection handshake (see ps_protocol.h): message bodies, the HMAC-SHA256
// challenge-response both sides compute, and the client's blocking side of the exchange.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/hmac.h"
#include "common/socket.h"

namespace pscore::ps {

using crypto::constant_time_equal;
using crypto::Digest;
using crypto::hmac_sha256;

using Nonce = std::array<uint8_t, 16>;

struct Hello {
  uint32_t version = 0;
  int32_t worker = 0;
  Nonce nonce{};
  std::string job_id;
};

struct Welcome {
  int32_t shard = 0;
  int32_t num_shards = 0;
  int32_t num_workers = 0;
  uint64_t incarnation = 0;  // changes every time the server starts
  Digest server_mac{};
};

Nonce random_nonce();
// What a client proves: HMAC(token, "pscore-ps/client" | server nonce | client nonce | worker |
// job id). The server answers with HMAC(token, "pscore-ps/server" | client nonce | server nonce).
Digest client_mac(const std::string& token, const Nonce& server_nonce, const Hello& hello);
Digest server_mac(const std::string& token, const Nonce& client_nonce, const Nonce& server_nonce);

std::string encode_hello(const Hello& h);
Hello decode_hello(const uint8_t* p, size_t n);
std::string encode_welcome(const Welcome& w);
Welcome decode_welcome(const uint8_t* p, size_t n);

struct ClientHandshake {
  int worker = 0;
  std::string job_id;
  std::string token;
  std::string peer;  // names the server in errors ("shard 1 (127.0.0.1:7164)")
};

// Runs the client side on a connected blocking socket. Throws Error when the server refuses the
// worker (wrong token, job id or worker id) or cannot prove it knows the token, NetworkError
// when the connection breaks, TimeoutError past the deadline.
Welcome client_handshake(const Socket& s, const ClientHandshake& opts, const Deadline& deadline);

}  // namespace pscore::ps
