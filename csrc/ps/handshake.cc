#include "ps/handshake.h"

#include <random>
#include <vector>

#include "common/frame.h"
#include "ps/byte_codec.h"
#include "ps/ps_protocol.h"

namespace pscore::ps {
namespace {

std::string frame_bytes(MsgType type, const std::string& body) {
  FrameHeader h;
  h.type = static_cast<uint8_t>(type);
  h.length = body.size();
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  return out + body;
}

std::string read_frame(const Socket& s, MsgType want, const Deadline& d, const std::string& peer) {
  FrameHeader h;
  s.recv_all(&h, sizeof(h), d, peer + ": handshake");
  validate_frame(h, kMaxHandshakeBytes, peer);
  std::string body(h.length, '\0');
  if (h.length) s.recv_all(body.data(), h.length, d, peer + ": handshake");
  if (h.type == static_cast<uint8_t>(MsgType::kError)) {
    ByteReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size(), "handshake error");
    r.get<uint32_t>();
    // A deliberate refusal (wrong token, job id, worker id): retrying cannot help.
    throw Error(peer + " refused the connection: " + r.get_string());
  }
  if (h.type != static_cast<uint8_t>(want))
    throw NetworkError(peer + ": handshake expected " + msg_type_name(uint8_t(want)) + ", got " +
                       msg_type_name(h.type));
  return body;
}

}  // namespace

Nonce random_nonce() {
  std::random_device rd;
  Nonce n;
  for (size_t i = 0; i < n.size(); i += 4) {
    uint32_t v = rd();
    for (size_t j = 0; j < 4; ++j) n[i + j] = static_cast<uint8_t>(v >> (8 * j));
  }
  return n;
}

Digest client_mac(const std::string& token, const Nonce& server_nonce, const Hello& hello) {
  std::vector<uint8_t> msg;
  ByteWriter w(&msg);
  w.append("pscore-ps/client", 16);
  w.append(server_nonce.data(), server_nonce.size());
  w.append(hello.nonce.data(), hello.nonce.size());
  w.put<int32_t>(hello.worker);
  w.append(hello.job_id.data(), hello.job_id.size());
  return hmac_sha256(token, msg.data(), msg.size());
}

Digest server_mac(const std::string& token, const Nonce& client_nonce, const Nonce& server_nonce) {
  std::vector<uint8_t> msg;
  ByteWriter w(&msg);
  w.append("pscore-ps/server", 16);
  w.append(client_nonce.data(), client_nonce.size());
  w.append(server_nonce.data(), server_nonce.size());
  return hmac_sha256(token, msg.data(), msg.size());
}

std::string encode_hello(const Hello& h) {
  std::vector<uint8_t> b;
  ByteWriter w(&b);
  w.put<uint32_t>(h.version);
  w.put<int32_t>(h.worker);
  w.append(h.nonce.data(), h.nonce.size());
  w.put_string(h.job_id);
  return std::string(b.begin(), b.end());
}

Hello decode_hello(const uint8_t* p, size_t n) {
  ByteReader r(p, n, "hello");
  Hello h;
  h.version = r.get<uint32_t>();
  h.worker = r.get<int32_t>();
  std::memcpy(h.nonce.data(), r.take(h.nonce.size()), h.nonce.size());
  h.job_id = r.get_string(1024);
  return h;
}

std::string encode_welcome(const Welcome& w) {
  std::vector<uint8_t> b;
  ByteWriter bw(&b);
  bw.put<int32_t>(w.shard);
  bw.put<int32_t>(w.num_shards);
  bw.put<int32_t>(w.num_workers);
  bw.put<uint64_t>(w.incarnation);
  bw.append(w.server_mac.data(), w.server_mac.size());
  return std::string(b.begin(), b.end());
}

Welcome decode_welcome(const uint8_t* p, size_t n) {
  ByteReader r(p, n, "welcome");
  Welcome w;
  w.shard = r.get<int32_t>();
  w.num_shards = r.get<int32_t>();
  w.num_workers = r.get<int32_t>();
  w.incarnation = r.get<uint64_t>();
  std::memcpy(w.server_mac.data(), r.take(w.server_mac.size()), w.server_mac.size());
  return w;
}

Welcome client_handshake(const Socket& s, const ClientHandshake& opts, const Deadline& deadline) {
  Hello hello;
  hello.version = kProtocolVersion;
  hello.worker = opts.worker;
  hello.nonce = random_nonce();
  hello.job_id = opts.job_id;
  std::string out = frame_bytes(MsgType::kHello, encode_hello(hello));
  s.send_all(out.data(), out.size(), deadline, opts.peer + ": handshake");

  std::string challenge = read_frame(s, MsgType::kChallenge, deadline, opts.peer);
  if (challenge.size() != 17) throw NetworkError(opts.peer + ": malformed challenge");
  Nonce server_nonce;
  std::memcpy(server_nonce.data(), challenge.data(), 16);
  Digest mac = client_mac(opts.token, server_nonce, hello);
  out = frame_bytes(MsgType::kAuth, std::string(reinterpret_cast<const char*>(mac.data()), 32));
  s.send_all(out.data(), out.size(), deadline, opts.peer + ": handshake");

  std::string body;
  try {
    body = read_frame(s, MsgType::kWelcome, deadline, opts.peer);
  } catch (const NetworkError&) {
    throw;
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (check that PSCORE_AUTH_TOKEN matches the servers')");
  }
  Welcome w = decode_welcome(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  if (!opts.token.empty()) {
    Digest expect = server_mac(opts.token, hello.nonce, server_nonce);
    if (!constant_time_equal(expect.data(), w.server_mac.data(), expect.size()))
      throw Error(opts.peer + ": the server could not prove it knows the auth token");
  }
  return w;
}

}  // namespace pscore::ps
