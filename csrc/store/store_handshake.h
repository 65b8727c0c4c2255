// The TCP store's connection handshake: the client's first frame is kHello (version, whether it
// authenticates, its nonce, the job id). A store with no token answers kOk and serves; a store
// with a token answers with its nonce and proof (common/auth.h), waits for the client's kAuth
// proof, and serves nothing before it checks out. Refusals are a kAuthFailed reply, then close.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/auth.h"
#include "common/frame.h"
#include "common/handshake.h"
#include "store/store_protocol.h"

namespace pscore {

constexpr uint32_t kStoreHandshakeVersion = 1;
// Largest frame a connection may send before it has authenticated.
constexpr uint64_t kMaxHandshakeBytes = 4096;
// A connection to a store with a token that has not authenticated by then is closed.
constexpr int64_t kStoreHandshakeTimeoutMs = 10000;
constexpr uint8_t kHelloAuthenticate = 1;  // hello flag: the client has a token
// The role context both proofs are bound to (auth::Binding::context).
constexpr const char* kStoreAuthContext = "pscore tcpstore";

// Who a store or client is, for the handshake. token "" = no authentication.
struct StoreAuthOptions {
  std::string token;
  std::string job_id = "pscore";
};

struct StoreHello {
  uint32_t version = kStoreHandshakeVersion;
  bool authenticate = false;
  auth::Nonce client_nonce{};
  std::string job_id;
};

// The server's answer to a hello: authenticate is false when the store has no token.
struct StoreChallenge {
  bool authenticate = false;
  auth::Nonce server_nonce{};
  auth::Proof server_proof{};
};

std::string encode_hello(const StoreHello& hello);
// Throws NetworkError naming `peer` when the payload is malformed.
StoreHello decode_hello(const std::string& payload, const std::string& peer);
std::string encode_challenge(const StoreChallenge& challenge);
StoreChallenge decode_challenge(const std::string& payload, const std::string& peer);

// The server's side of one connection. Not thread-safe (the server's one thread owns it).
class StoreServerHandshake {
 public:
  enum class State { kFresh, kAwaitingProof, kReady };
  enum class Action {
    kServe,   // a data op on a store that needs no authentication: handle it
    kReply,   // send a kOk reply with `payload`, keep the connection
    kRefuse,  // send a kAuthFailed reply with `payload` (a message), then close
  };
  struct Step {
    Action action = Action::kServe;
    std::string payload;
    bool auth_failure = false;  // count and log it
  };

  // Judges one frame received before or at the end of the handshake; throws NetworkError for
  // frames that break the protocol (a second hello, a malformed payload).
  Step on_frame(const StoreAuthOptions& server, const FrameHeader& h, const std::string& payload,
                const std::string& peer);
  State state() const { return state_; }

 private:
  Step on_hello(const StoreAuthOptions& server, const std::string& payload,
                const std::string& peer);
  Step on_proof(const StoreAuthOptions& server, const std::string& payload,
                const std::string& peer);

  State state_ = State::kFresh;
  std::optional<auth::ServerHandshake> auth_;  // made by the hello
};

}  // namespace pscore
