// SHA-256 and HMAC-SHA256 of common/hmac.h: the FIPS 180-4 and RFC 4231 test vectors, then
// many key and message lengths (across the 64-byte block boundaries) against Python's hashlib.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/hmac.h"

namespace pscore::crypto {
namespace {

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

std::string hex_of(const Digest& d) { return hex(d.data(), d.size()); }

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(hex_of(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex_of(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_of(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex_of(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalUpdatesMatchOneShot) {
  std::string msg;
  for (int i = 0; i < 1000; ++i) msg += static_cast<char>(i * 7 + 3);
  for (size_t chunk : {1u, 3u, 63u, 64u, 65u, 200u}) {
    Sha256 h;
    for (size_t at = 0; at < msg.size(); at += chunk) h.update(msg.substr(at, chunk));
    EXPECT_EQ(hex_of(h.digest()), hex_of(sha256(msg))) << "chunk " << chunk;
  }
}

struct Rfc4231Case {
  std::string key_hex;
  std::string data;  // raw bytes
  std::string mac_hex;
  size_t truncate = 32;
};

TEST(HmacSha256, Rfc4231Vectors) {
  std::vector<Rfc4231Case> cases = {
      {"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"4a656665", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(40, 'a'), std::string(50, '\xdd'),  // key: 20 bytes of 0xaa
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {"0102030405060708090a0b0c0d0e0f10111213141516171819", std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {"0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c", "Test With Truncation",
       "a3b6167473100ee06e0c796c2955552b", 16},
      {std::string(262, 'a'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::string(262, 'a'),
       "This is a test using a larger than block-size key and a larger than block-size data. "
       "The key needs to be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    Digest mac = hmac_sha256(unhex(c.key_hex), c.data);
    EXPECT_EQ(hex(mac.data(), c.truncate), c.mac_hex) << "RFC 4231 test case " << i + 1;
  }
}

// Writes "key_hex msg_hex" lines, asks python3's hashlib/hmac for both digests, and compares.
TEST(HmacSha256, MatchesPythonHashlib) {
  if (std::system("python3 -c 'import hashlib, hmac' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with hashlib is not available";
  std::vector<std::pair<std::string, std::string>> inputs;
  for (size_t key_len : {0u, 1u, 32u, 63u, 64u, 65u, 131u})
    for (size_t msg_len : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 128u, 1000u}) {
      std::string key, msg;
      for (size_t i = 0; i < key_len; ++i) key += static_cast<char>((i * 31 + key_len) & 0xff);
      for (size_t i = 0; i < msg_len; ++i) msg += static_cast<char>((i * 17 + msg_len * 3) & 0xff);
      inputs.emplace_back(key, msg);
    }
  char path[] = "/tmp/pscore_hmac_XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  {
    std::ofstream out(path);
    for (const auto& [k, m] : inputs)
      out << "k" << hex(k.data(), k.size()) << " m" << hex(m.data(), m.size()) << "\n";
  }
  std::string cmd =
      "python3 -c \"import sys, hashlib, hmac\n"
      "for line in open(sys.argv[1]):\n"
      "    k, m = (bytes.fromhex(x[1:]) for x in line.split())\n"
      "    print(hashlib.sha256(m).hexdigest(), hmac.new(k, m, hashlib.sha256).hexdigest())\" ";
  FILE* p = ::popen((cmd + path).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) output.append(buf, n);
  EXPECT_EQ(::pclose(p), 0);
  ::unlink(path);
  std::istringstream lines(output);
  size_t checked = 0;
  for (const auto& [k, m] : inputs) {
    std::string want_sha, want_mac;
    ASSERT_TRUE(lines >> want_sha >> want_mac) << "python printed too few lines";
    EXPECT_EQ(hex_of(sha256(m)), want_sha) << "message of " << m.size() << " bytes";
    EXPECT_EQ(hex_of(hmac_sha256(k, m)), want_mac)
        << "key of " << k.size() << " bytes, message of " << m.size() << " bytes";
    ++checked;
  }
  EXPECT_EQ(checked, inputs.size());
}

TEST(ConstantTimeEqual, ComparesEveryByte) {
  std::string a(32, 'x'), b(32, 'x');
  EXPECT_TRUE(constant_time_equal(a.data(), b.data(), a.size()));
  for (size_t i : {0u, 15u, 31u}) {
    std::string c = a;
    c[i] ^= 1;
    EXPECT_FALSE(constant_time_equal(a.data(), c.data(), a.size())) << "differs at " << i;
  }
  EXPECT_TRUE(constant_time_equal(a.data(), b.data(), 0));
}

}  // namespace
}  // namespace pscore::crypto
