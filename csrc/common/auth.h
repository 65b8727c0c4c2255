// Shared-secret authentication for pscore connections: where the token comes from, and the
// steps of the mutual HMAC-SHA256 challenge-response that the store, the transport and the
// parameter server each frame in their own protocol (docs/security.md).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/hmac.h"

namespace pscore::auth {

constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = crypto::kDigestBytes;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = crypto::Digest;

constexpr const char* kTokenEnv = "PSCORE_AUTH_TOKEN";
constexpr const char* kTokenFileEnv = "PSCORE_AUTH_TOKEN_FILE";
constexpr const char* kInsecureEnv = "PSCORE_INSECURE";

// The token from PSCORE_AUTH_TOKEN, else from the file PSCORE_AUTH_TOKEN_FILE names; "" when
// neither is set (no authentication). Throws std::invalid_argument when the file cannot be read
// or is empty, or when both are set and disagree.
std::string token_from_env();
// A token file's contents without trailing whitespace; throws std::invalid_argument naming the
// path when it cannot be read or holds no token.
std::string read_token_file(const std::string& path);
// True when PSCORE_INSECURE is 1/true/yes/on, false when unset, empty or 0/false/no/off;
// throws std::invalid_argument for anything else.
bool insecure_from_env();

// 32 bytes from the kernel's random generator; throws pscore::Error when it is unavailable.
Nonce random_nonce();

// What a proof is bound to besides the nonces: the job id and a role-specific context (e.g.
// "tcpstore", "transport rank 3 -> rank 1 lane 0 of 4"), so a proof made for one kind of
// connection is worthless on another.
struct Binding {
  std::string job_id;
  std::string context;
};

// The exchange: the client sends its nonce; the server answers with its own nonce and
// server_proof; the client checks that proof (so it never talks to an impostor) and answers
// with client_proof, which the server checks before it serves anything. Each proof is
//   HMAC(token, label | server nonce | client nonce | job id | context)
// with every field length-prefixed and a label per direction, so neither proof can be replayed
// as the other.
Proof server_proof(const std::string& token, const Nonce& server_nonce, const Nonce& client_nonce,
                   const Binding& binding);
Proof client_proof(const std::string& token, const Nonce& server_nonce, const Nonce& client_nonce,
                   const Binding& binding);
// Constant-time check of a received proof; false when its length is not kProofBytes.
bool proof_matches(const Proof& expected, const void* received, size_t nbytes);

// Prints failed or refused handshakes to stderr, at most once per peer address per quiet
// period, so a port scanner or a misconfigured rank cannot flood the log. Thread-safe.
class FailureLog {
 public:
  explicit FailureLog(std::string server_name, int64_t quiet_ms = 60000);
  // Counts the failure; prints "pscore: <server>: dropped connection from <peer>: <reason>"
  // unless this address was reported within the quiet period. Returns whether it printed.
  bool report(const std::string& peer_address, const std::string& reason);
  int64_t failures() const;
  // "N connection(s) refused or failed authentication, the last from ADDR: REASON", or "".
  std::string summary() const;

 private:
  std::string server_name_;
  std::chrono::milliseconds quiet_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> last_printed_;
  int64_t failures_ = 0;
  std::string last_peer_;
  std::string last_reason_;
};

// The address part of "host:port" (what a peer's failures are grouped by).
std::string address_of(const std::string& peer_address);

}  // namespace pscore::auth
