#include "store/tcp_store_client.h"

#include <stdexcept>

#include "common/error.h"
#include "common/frame.h"

namespace pscore {

using store_wire::Status;

namespace {
constexpr size_t kMaxIdleConnections = 8;
}

TcpStoreClient::TcpStoreClient(std::string host, int port) : host_(std::move(host)), port_(port) {
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
  try {
    Socket s = Socket::connect(host_, port_, deadline, "the TCPStore master");
    s.set_nodelay();
    return s;
  } catch (const TimeoutError& e) {
    throw TimeoutError(name_ + ": cannot reach the store master (is rank 0 running and " +
                       "listening there?): " + e.what());
  }
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
    s.recv_all(&h, sizeof(h), deadline, what);
    validate_frame(h, store_wire::kMaxPayloadBytes, name_);
    if (h.seq != seq)
      throw NetworkError(name_ + ": " + what + ": reply carries seq " + std::to_string(h.seq) +
                         ", expected " + std::to_string(seq));
    r.payload.resize(h.length);
    s.recv_all(r.payload.data(), h.length, deadline, what);
    r.status = static_cast<Status>(h.type);
  } catch (const TimeoutError& e) {
    throw TimeoutError(name_ + ": no reply to " + what + " in time (server hung or " +
                       "unreachable): " + e.what());
  } catch (const NetworkError& e) {
    throw NetworkError(name_ + ": " + what + " failed, connection lost: " + e.what());
  }
  release(std::move(s));
  if (r.status == Status::kInvalid || r.status == Status::kError) {
    store_wire::PayloadReader in(r.payload.data(), r.payload.size(), name_);
    std::string message = in.bytes();
    if (r.status == Status::kInvalid) throw std::invalid_argument(message);
    throw StoreError(name_ + ": " + message);
  }
  if (r.status != Status::kOk && r.status != Status::kTimeout)
    throw NetworkError(name_ + ": " + what + ": unknown reply status " +
                       std::to_string(static_cast<int>(r.status)));
  return r;
}

}  // namespace pscore
