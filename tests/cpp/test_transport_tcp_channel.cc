// TcpChannel's reads: a header read takes the rest of a small message, and whatever arrived behind
// it, in the same recv and hands them to the next reads; a rest that arrives later is read from
// the socket, a peek completes a header carried in part, and elements split across recvs reach a
// consumer whole.
#include <gtest/gtest.h>
#include <sys/ioctl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/socket.h"
#include "transport/tcp/tcp_channel.h"

namespace pscore {
namespace {

constexpr size_t kHeader = 16;

// A channel that reads what `writer` sends over loopback (its own sends go to `sink_socket`).
struct Loopback {
  Socket writer;
  Socket sink_socket;
  std::unique_ptr<TcpChannel> channel;
};

std::pair<Socket, Socket> connected() {
  Socket listener = Socket::listen("127.0.0.1", 0);
  Socket a = Socket::connect("127.0.0.1", listener.local_port(), Deadline(5000), "test");
  Socket b = listener.accept(Deadline(5000));
  return {std::move(a), std::move(b)};
}

Loopback loopback() {
  auto [writer, rx] = connected();
  auto [tx, sink_socket] = connected();
  Loopback l{std::move(writer), std::move(sink_socket), nullptr};
  l.channel = std::make_unique<TcpChannel>(std::move(tx), std::move(rx), "rank 1");
  return l;
}

void send(Loopback& l, const std::string& bytes) {
  l.writer.send_all(bytes.data(), bytes.size(), Deadline(5000), "test");
}

// Waits until n bytes have arrived and wait unread.
void await_arrival(TcpChannel& ch, size_t n) {
  std::vector<char> seen(n);
  const Deadline d(5000);
  while (ch.peek(seen.data(), n) < n) ASSERT_FALSE(d.expired()) << "bytes did not arrive";
}

// Bytes still in the channel's socket, unread by it.
size_t in_socket(const TcpChannel& ch) {
  int n = -1;
  EXPECT_EQ(::ioctl(ch.rx_fd(), FIONREAD, &n), 0);
  return static_cast<size_t>(n);
}

// Reads into `dst` until it holds `n` bytes.
std::string read_all(TcpChannel& ch, size_t n) {
  std::string got(n, '\0');
  Sink sink;
  const Deadline d(5000);
  for (size_t done = 0; done < n;) {
    sink.direct = got.data() + done;
    done += ch.read_some(n - done, 1, sink);
    if (d.expired()) ADD_FAILURE() << "read " << done << " of " << n;
    if (d.expired()) break;
  }
  return got;
}

TEST(TcpChannel, AHeaderReadTakesTheMessagesBehindItsOwn) {
  Loopback l = loopback();
  const std::string first = std::string(kHeader, 'A') + std::string(100, 'a');
  const std::string second = std::string(kHeader, 'B') + std::string(100, 'b');
  send(l, first + second);
  await_arrival(*l.channel, first.size() + second.size());

  char header[kHeader];
  ASSERT_EQ(l.channel->read_header(header, kHeader, 100), kHeader);
  EXPECT_EQ(std::string(header, kHeader), std::string(kHeader, 'A'));
  EXPECT_EQ(in_socket(*l.channel), 0u);  // both messages came along in one recv
  EXPECT_EQ(read_all(*l.channel, 100), std::string(100, 'a'));
  ASSERT_EQ(l.channel->read_header(header, kHeader, 100), kHeader);
  EXPECT_EQ(std::string(header, kHeader), std::string(kHeader, 'B'));
  EXPECT_EQ(read_all(*l.channel, 100), std::string(100, 'b'));

  // With nothing carried, the next header is read from the socket again.
  send(l, std::string(kHeader, 'C') + std::string(10, 'c'));
  await_arrival(*l.channel, kHeader + 10);
  ASSERT_EQ(l.channel->read_header(header, kHeader, 10), kHeader);
  EXPECT_EQ(std::string(header, kHeader), std::string(kHeader, 'C'));
  EXPECT_EQ(read_all(*l.channel, 10), std::string(10, 'c'));
}

TEST(TcpChannel, APeekCompletesAHeaderCarriedInPart) {
  Loopback l = loopback();
  send(l, std::string(kHeader, 'A') + std::string(100, 'a') + std::string(kHeader / 2, 'B'));
  await_arrival(*l.channel, kHeader + 100 + kHeader / 2);
  char header[kHeader];
  ASSERT_EQ(l.channel->read_header(header, kHeader, 100), kHeader);
  EXPECT_EQ(read_all(*l.channel, 100), std::string(100, 'a'));

  char peeked[kHeader];
  EXPECT_EQ(l.channel->peek(peeked, kHeader), kHeader / 2);  // half a header so far
  send(l, std::string(kHeader - kHeader / 2, 'B') + std::string(20, 'b'));
  const Deadline d(5000);
  while (l.channel->peek(peeked, kHeader) < kHeader) ASSERT_FALSE(d.expired());
  EXPECT_EQ(std::string(peeked, kHeader), std::string(kHeader, 'B'));
  EXPECT_EQ(l.channel->peek(peeked, kHeader), kHeader);  // a peek takes nothing away

  ASSERT_EQ(l.channel->read_header(header, kHeader, 20), kHeader);
  EXPECT_EQ(std::string(header, kHeader), std::string(kHeader, 'B'));
  EXPECT_EQ(read_all(*l.channel, 20), std::string(20, 'b'));
}

TEST(TcpChannel, ARestThatArrivesLaterIsReadFromTheSocket) {
  Loopback l = loopback();
  send(l, std::string(kHeader, 'H') + std::string(40, 'x'));
  await_arrival(*l.channel, kHeader + 40);
  char header[kHeader];
  ASSERT_EQ(l.channel->read_header(header, kHeader, 100), kHeader);
  Sink sink;
  std::string payload(100, '\0');
  sink.direct = payload.data();
  EXPECT_EQ(l.channel->read_some(100, 1, sink), 40u);  // what came with the header
  send(l, std::string(60, 'y'));
  EXPECT_EQ(read_all(*l.channel, 60), std::string(60, 'y'));
  EXPECT_EQ(payload.substr(0, 40), std::string(40, 'x'));
}

TEST(TcpChannel, ElementsSplitAcrossRecvsReachAConsumerWhole) {
  Loopback l = loopback();
  std::vector<float> values(10);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i + 1);
  std::string payload(reinterpret_cast<const char*>(values.data()), sizeof(float) * values.size());
  send(l, std::string(kHeader, 'H') + payload.substr(0, 13));  // three floats and a byte
  await_arrival(*l.channel, kHeader + 13);
  char header[kHeader];
  ASSERT_EQ(l.channel->read_header(header, kHeader, payload.size()), kHeader);

  std::vector<float> consumed;
  Sink sink;
  sink.consume = [&](const void* src, size_t n) {
    ASSERT_EQ(n % sizeof(float), 0u);
    const auto* f = static_cast<const float*>(src);
    consumed.insert(consumed.end(), f, f + n / sizeof(float));
  };
  EXPECT_EQ(l.channel->read_some(payload.size(), sizeof(float), sink), 12u);
  send(l, payload.substr(13));
  const Deadline d(5000);
  for (size_t done = 12; done < payload.size() && !d.expired();)
    done += l.channel->read_some(payload.size() - done, sizeof(float), sink);
  EXPECT_EQ(consumed, values);
}

TEST(TcpChannel, ALargeRestStaysInTheSocketForTheReader) {
  Loopback l = loopback();
  const size_t n = 32 << 10;  // above the read-ahead's 16 KB
  std::string payload(n, '\0');
  for (size_t i = 0; i < n; ++i) payload[i] = static_cast<char>(i * 7);
  send(l, std::string(kHeader, 'H') + payload);
  await_arrival(*l.channel, kHeader + n);
  char header[kHeader];
  ASSERT_EQ(l.channel->read_header(header, kHeader, n), kHeader);
  EXPECT_EQ(std::string(header, kHeader), std::string(kHeader, 'H'));
  EXPECT_EQ(in_socket(*l.channel), n);
  EXPECT_EQ(read_all(*l.channel, n), payload);
}

}  // namespace
}  // namespace pscore
