#include "store/tcp_store_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/error.h"
#include "common/frame.h"

namespace pscore {

using store_wire::Status;

namespace {

constexpr size_t kMaxIdleConnections = 8;
// First read of a reply: header and payload together when the payload is small.
constexpr size_t kFirstReadBytes = 4096;

// Reads one reply frame. It waits for readability before reading (the reply never arrives at
// once), and the first recv takes up to kFirstReadBytes, so a small reply costs one poll and
// one recv. A single request is in flight per connection: bytes past the frame are an error.
void read_reply(int fd, const Deadline& deadline, const std::string& what, const std::string& peer,
                FrameHeader* h, std::string* payload) {
  std::string buf;
  size_t need = kFirstReadBytes;
  bool have_header = false;
  while (!have_header || buf.size() < need) {
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc == 0) throw TimeoutError(what + ": timed out");
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw NetworkError(errno_message(what + ": poll", errno));
    }
    size_t old = buf.size();
    buf.resize(need);
    ssize_t k = ::recv(fd, buf.data() + old, need - old, MSG_DONTWAIT);
    buf.resize(old + (k > 0 ? static_cast<size_t>(k) : 0));
    if (k == 0) throw NetworkError(what + ": connection closed by peer");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw NetworkError(errno_message(what + ": recv failed", errno));
    }
    if (!have_header && buf.size() >= sizeof(FrameHeader)) {
      std::memcpy(h, buf.data(), sizeof(FrameHeader));
      validate_frame(*h, store_wire::kMaxPayloadBytes, peer);
      have_header = true;
      need = sizeof(FrameHeader) + h->length;
      if (buf.size() > need)
        throw NetworkError(peer + ": " + what + ": " + std::to_string(buf.size() - need) +
                           " bytes past the reply frame");
    }
  }
  payload->assign(buf, sizeof(FrameHeader), std::string::npos);
}

}  // namespace

TcpStoreClient::TcpStoreClient(std::string host, int port, StoreAuthOptions auth)
    : host_(std::move(host)), port_(port), auth_(std::move(auth)) {
  name_ = "TCPStore(" + host_ + ":" + std::to_string(port_) + ")";
}

void TcpStoreClient::connect(const Deadline& deadline) { release(acquire(deadline)); }

Socket TcpStoreClient::acquire(const Deadline& deadline) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      Socket s = std::move(idle_.back());
      idle_.pop_back();
      return s;
    }
  }
  Socket s;
  try {
    s = Socket::connect(host_, port_, deadline, "the TCPStore master");
  } catch (const TimeoutError& e) {
    throw TimeoutError(name_ + ": cannot reach the store master (is rank 0 running and " +
                       "listening there?): " + e.what());
  }
  s.set_nodelay();
  handshake(s, deadline);
  return s;
}

NetworkError TcpStoreClient::auth_error(const std::string& detail) const {
  return NetworkError(name_ + ": authentication with store at " + host_ + ":" +
                      std::to_string(port_) + " failed (wrong PSCORE_AUTH_TOKEN?): " + detail);
}

std::string TcpStoreClient::exchange(const Socket& s, store_wire::Op op, const std::string& payload,
                                     const Deadline& deadline) {
  uint64_t seq = next_seq_.fetch_add(1);
  std::string what = std::string("handshake (") + store_wire::op_name(op) + ")";
  FrameHeader h;
  std::string reply;
  try {
    std::string frame = store_wire::encode_frame(static_cast<uint8_t>(op), seq, payload);
    s.send_all(frame.data(), frame.size(), deadline, what);
    read_reply(s.fd(), deadline, what, name_, &h, &reply);
  } catch (const TimeoutError& e) {
    throw TimeoutError(name_ + ": no answer to the " + what + " in time (is this a pscore " +
                       "TCPStore?): " + e.what());
  } catch (const NetworkError& e) {
    throw auth_error(std::string("the connection broke during the handshake: ") + e.what());
  }
  if (h.seq != seq) throw auth_error("the reply to the " + what + " carries the wrong seq");
  if (h.type == static_cast<uint8_t>(Status::kAuthFailed)) {
    WireReader in(reply.data(), reply.size(), name_);
    throw auth_error("the store says: " + in.string("refusal"));
  }
  if (h.type != static_cast<uint8_t>(Status::kOk))
    throw auth_error("unexpected reply status " + std::to_string(h.type) + " to the " + what);
  return reply;
}

// The client's side of store_handshake.h: hello with our nonce; with a token, check the store's
// proof before proving ourselves, so a client never hands anything to an impostor.
void TcpStoreClient::handshake(const Socket& s, const Deadline& deadline) {
  StoreHello hello;
  hello.authenticate = !auth_.token.empty();
  if (hello.authenticate) hello.client_nonce = auth::random_nonce();
  hello.job_id = auth_.job_id;
  StoreChallenge c =
      decode_challenge(exchange(s, store_wire::Op::kHello, encode_hello(hello), deadline), name_);
  if (!hello.authenticate) return;
  if (!c.authenticate) throw auth_error("the store did not ask this client to authenticate");
  auth::Proof proof;
  try {
    proof = auth::answer_challenge(auth_.token, hello.client_nonce, c.server_nonce, c.server_proof,
                                   {auth_.job_id, kStoreAuthContext}, "the store");
  } catch (const Error& e) {
    throw auth_error(e.what());
  }
  std::string_view bytes(reinterpret_cast<const char*>(proof.data()), proof.size());
  exchange(s, store_wire::Op::kAuth, WireWriter<>().string(bytes, "client proof").take(), deadline);
}

void TcpStoreClient::release(Socket socket) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(socket));
}

StoreResponse TcpStoreClient::call(store_wire::Op op, const std::string& payload,
                                   const Deadline& connect_deadline, const Deadline& reply_deadline,
                                   const std::string& what) {
  Socket s = acquire(connect_deadline);
  const Deadline& deadline = reply_deadline;
  uint64_t seq = next_seq_.fetch_add(1);
  StoreResponse r;
  // On any failure the socket is closed, not returned: its stream may be mid-frame.
  try {
    std::string frame = store_wire::encode_frame(static_cast<uint8_t>(op), seq, payload);
    s.send_all(frame.data(), frame.size(), deadline, what);
    FrameHeader h;
    read_reply(s.fd(), deadline, what, name_, &h, &r.payload);
    if (h.seq != seq)
      throw NetworkError(name_ + ": " + what + ": reply carries seq " + std::to_string(h.seq) +
                         ", expected " + std::to_string(seq));
    r.status = static_cast<Status>(h.type);
  } catch (const TimeoutError& e) {
    throw TimeoutError(name_ + ": no reply to " + what + " in time (server hung or " +
                       "unreachable): " + e.what());
  } catch (const NetworkError& e) {
    throw NetworkError(name_ + ": " + what + " failed, connection lost: " + e.what());
  }
  if (r.status == Status::kAuthFailed) {  // the server closes this connection after it
    WireReader in(r.payload.data(), r.payload.size(), name_);
    throw auth_error("the store says: " + in.string("refusal"));
  }
  release(std::move(s));
  if (r.status == Status::kInvalid || r.status == Status::kError) {
    WireReader in(r.payload.data(), r.payload.size(), name_);
    std::string message = in.string("error message");
    if (r.status == Status::kInvalid) throw std::invalid_argument(message);
    throw StoreError(name_ + ": " + message);
  }
  if (r.status != Status::kOk && r.status != Status::kTimeout)
    throw NetworkError(name_ + ": " + what + ": unknown reply status " +
                       std::to_string(static_cast<int>(r.status)));
  return r;
}

}  // namespace pscore
