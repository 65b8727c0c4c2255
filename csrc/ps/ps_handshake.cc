#include "ps/ps_handshake.h"

#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/frame_io.h"
#include "common/handshake.h"
#include "ps/byte_codec.h"
#include "ps/ps_protocol.h"

namespace pscore::ps {
namespace {

constexpr uint8_t kHelloAuthenticate = 1;

template <size_t N>
void take_exact(ByteReader& r, std::array<uint8_t, N>& out) {
  std::memcpy(out.data(), r.take(N), N);
}

void expect_end(const ByteReader& r, const char* what) {
  if (r.remaining() != 0)
    throw NetworkError(std::string(what) + ": " + std::to_string(r.remaining()) +
                       " unexpected trailing bytes");
}

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

void send(const Socket& s, MsgType type, const std::string& body, const Deadline& d,
          const std::string& peer) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(type);
  send_frame(s, h, body, d, peer + ": handshake");
}

// The next handshake frame: its type and body. A kError frame is the server's refusal.
std::string read_frame(const Socket& s, const Deadline& d, const std::string& peer, uint8_t* type) {
  Frame f = recv_frame(s, kMaxHandshakeBytes, d, peer, peer + ": handshake");
  if (f.header.type == static_cast<uint8_t>(MsgType::kError)) {
    ByteReader r(bytes(f.payload), f.payload.size(), "handshake error");
    r.get<uint32_t>();
    // A deliberate refusal (no or wrong token, job id, worker id): retrying cannot help.
    throw Error(peer + " refused the connection: " + r.get_string());
  }
  *type = f.header.type;
  return std::move(f.payload);
}

NetworkError unexpected(const std::string& peer, MsgType want, uint8_t got) {
  return NetworkError(peer + ": handshake expected " + msg_type_name(uint8_t(want)) + ", got " +
                      msg_type_name(got));
}

}  // namespace

auth::Binding handshake_binding(const std::string& job_id, int32_t worker) {
  return {job_id, "pscore ps worker " + std::to_string(worker)};
}

std::string encode_hello(const Hello& h) {
  std::vector<uint8_t> b;
  ByteWriter w(&b);
  w.put<uint32_t>(h.version);
  w.put<int32_t>(h.worker);
  w.put<uint8_t>(h.authenticate ? kHelloAuthenticate : 0);
  if (h.authenticate) w.append(h.client_nonce.data(), h.client_nonce.size());
  w.put_string(h.job_id);
  return std::string(b.begin(), b.end());
}

Hello decode_hello(const uint8_t* p, size_t n) {
  ByteReader r(p, n, "hello");
  Hello h;
  h.version = r.get<uint32_t>();
  h.worker = r.get<int32_t>();
  h.authenticate = (r.get<uint8_t>() & kHelloAuthenticate) != 0;
  if (h.authenticate) take_exact(r, h.client_nonce);
  h.job_id = r.get_string(1024);
  expect_end(r, "hello");
  return h;
}

std::string encode_challenge(const Challenge& c) {
  std::vector<uint8_t> b;
  ByteWriter w(&b);
  w.append(c.server_nonce.data(), c.server_nonce.size());
  w.append(c.server_proof.data(), c.server_proof.size());
  return std::string(b.begin(), b.end());
}

Challenge decode_challenge(const uint8_t* p, size_t n) {
  ByteReader r(p, n, "challenge");
  Challenge c;
  take_exact(r, c.server_nonce);
  take_exact(r, c.server_proof);
  expect_end(r, "challenge");
  return c;
}

std::string encode_welcome(const Welcome& w) {
  std::vector<uint8_t> b;
  ByteWriter bw(&b);
  bw.put<int32_t>(w.shard);
  bw.put<int32_t>(w.num_shards);
  bw.put<int32_t>(w.num_workers);
  bw.put<uint64_t>(w.incarnation);
  return std::string(b.begin(), b.end());
}

Welcome decode_welcome(const uint8_t* p, size_t n) {
  ByteReader r(p, n, "welcome");
  Welcome w;
  w.shard = r.get<int32_t>();
  w.num_shards = r.get<int32_t>();
  w.num_workers = r.get<int32_t>();
  w.incarnation = r.get<uint64_t>();
  expect_end(r, "welcome");
  return w;
}

Welcome client_handshake(const Socket& s, const ClientHandshake& opts, const Deadline& deadline) {
  Hello hello;
  hello.version = kProtocolVersion;
  hello.worker = opts.worker;
  hello.authenticate = !opts.token.empty();
  if (hello.authenticate) hello.client_nonce = auth::random_nonce();
  hello.job_id = opts.job_id;
  send(s, MsgType::kHello, encode_hello(hello), deadline, opts.peer);

  uint8_t type = 0;
  std::string body = read_frame(s, deadline, opts.peer, &type);
  if (hello.authenticate) {
    if (type != static_cast<uint8_t>(MsgType::kChallenge))
      throw Error(opts.peer +
                  " did not ask this client to authenticate (it has no auth token, "
                  "this process has one)");
    Challenge c = decode_challenge(bytes(body), body.size());
    auth::Proof proof;
    try {
      proof = auth::answer_challenge(opts.token, hello.client_nonce, c.server_nonce, c.server_proof,
                                     handshake_binding(opts.job_id, opts.worker), opts.peer);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (wrong PSCORE_AUTH_TOKEN?)");
    }
    send(s, MsgType::kAuth, std::string(proof.begin(), proof.end()), deadline, opts.peer);
    body = read_frame(s, deadline, opts.peer, &type);
  }
  if (type != static_cast<uint8_t>(MsgType::kWelcome))
    throw unexpected(opts.peer, MsgType::kWelcome, type);
  return decode_welcome(bytes(body), body.size());
}

}  // namespace pscore::ps
