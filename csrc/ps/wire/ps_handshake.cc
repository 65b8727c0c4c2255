#include "ps/wire/ps_handshake.h"

#include "common/error.h"
#include "common/frame_io.h"
#include "common/handshake.h"
#include "common/wire_codec.h"
#include "ps/wire/ps_protocol.h"

namespace pscore::ps {
namespace {

constexpr uint8_t kHelloAuthenticate = 1;

constexpr uint64_t kMaxMessageBytes = 1 << 16;  // of an error frame's message

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
    WireReader r(f.payload.data(), f.payload.size(), "handshake error");
    r.u32("error code");
    // A deliberate refusal (no or wrong token, job id, worker id): retrying cannot help.
    throw Error(peer + " refused the connection: " + r.string("message", kMaxMessageBytes));
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
  WireWriter<> w;
  w.u32(h.version).i32(h.worker).u8(h.authenticate ? kHelloAuthenticate : 0);
  if (h.authenticate) w.bytes(h.client_nonce.data(), h.client_nonce.size());
  w.string(h.job_id, "job id");
  return w.take();
}

Hello decode_hello(const uint8_t* p, size_t n) {
  WireReader r(p, n, "hello");
  Hello h;
  h.version = r.u32("version");
  h.worker = r.i32("worker");
  h.authenticate = (r.u8("flags") & kHelloAuthenticate) != 0;
  if (h.authenticate) r.copy_to(h.client_nonce.data(), h.client_nonce.size(), "client nonce");
  h.job_id = r.string("job id", 1024);
  r.finish();
  return h;
}

std::string encode_challenge(const Challenge& c) {
  WireWriter<> w;
  w.bytes(c.server_nonce.data(), c.server_nonce.size());
  w.bytes(c.server_proof.data(), c.server_proof.size());
  return w.take();
}

Challenge decode_challenge(const uint8_t* p, size_t n) {
  WireReader r(p, n, "challenge");
  Challenge c;
  r.copy_to(c.server_nonce.data(), c.server_nonce.size(), "server nonce");
  r.copy_to(c.server_proof.data(), c.server_proof.size(), "server proof");
  r.finish();
  return c;
}

std::string encode_welcome(const Welcome& w) {
  return WireWriter<>().i32(w.shard).i32(w.num_shards).i32(w.num_workers).u64(w.incarnation).take();
}

Welcome decode_welcome(const uint8_t* p, size_t n) {
  WireReader r(p, n, "welcome");
  Welcome w;
  w.shard = r.i32("shard");
  w.num_shards = r.i32("num_shards");
  w.num_workers = r.i32("num_workers");
  w.incarnation = r.u64("incarnation");
  r.finish();
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
