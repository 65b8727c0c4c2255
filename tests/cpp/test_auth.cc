// common/auth.h, common/handshake.h and common/bind_policy.h: where the token comes from, what the
// two proofs bind, the rate-limited failure log, and which binds need a token.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include "common/auth.h"
#include "common/bind_policy.h"
#include "common/error.h"
#include "common/handshake.h"
#include "common/socket.h"

namespace pscore::auth {
namespace {

// Sets (or, with nullptr, unsets) an environment variable for one test, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { had_ ? ::setenv(name_, old_.c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

std::string temp_file(const std::string& contents) {
  char path[] = "/tmp/pscore_token_XXXXXX";
  int fd = ::mkstemp(path);
  ::close(fd);
  std::ofstream(path) << contents;
  return path;
}

template <typename Fn>
std::string invalid_argument_message(Fn&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no std::invalid_argument)";
}

TEST(TokenFromEnv, UnsetMeansNoAuthentication) {
  ScopedEnv t(kTokenEnv, nullptr), f(kTokenFileEnv, nullptr);
  EXPECT_EQ(token_from_env(), "");
}

TEST(TokenFromEnv, ReadsTheVariable) {
  ScopedEnv t(kTokenEnv, "s3cret"), f(kTokenFileEnv, nullptr);
  EXPECT_EQ(token_from_env(), "s3cret");
}

TEST(TokenFromEnv, ReadsTheFileWithoutItsTrailingNewline) {
  std::string path = temp_file("from-file\n");
  ScopedEnv t(kTokenEnv, nullptr), f(kTokenFileEnv, path.c_str());
  EXPECT_EQ(token_from_env(), "from-file");
  ScopedEnv same(kTokenEnv, "from-file");  // both set to the same secret is fine
  EXPECT_EQ(token_from_env(), "from-file");
  ::unlink(path.c_str());
}

TEST(TokenFromEnv, BadFilesAndDisagreementsAreErrors) {
  std::string empty = temp_file(" \n");
  std::string other = temp_file("other");
  {
    ScopedEnv t(kTokenEnv, nullptr), f(kTokenFileEnv, "/nonexistent/pscore-token");
    EXPECT_EQ(invalid_argument_message(token_from_env),
              "PSCORE_AUTH_TOKEN_FILE=/nonexistent/pscore-token: cannot read the token file");
  }
  {
    ScopedEnv t(kTokenEnv, nullptr), f(kTokenFileEnv, empty.c_str());
    EXPECT_NE(invalid_argument_message(token_from_env).find("the token file is empty"),
              std::string::npos);
  }
  {
    ScopedEnv t(kTokenEnv, "mine"), f(kTokenFileEnv, other.c_str());
    EXPECT_NE(invalid_argument_message(token_from_env).find("hold different tokens"),
              std::string::npos);
  }
  ::unlink(empty.c_str());
  ::unlink(other.c_str());
}

TEST(InsecureFromEnv, AcceptsTheUsualSpellings) {
  for (const char* v : {"1", "true", "YES", "on"}) {
    ScopedEnv e(kInsecureEnv, v);
    EXPECT_TRUE(insecure_from_env()) << v;
  }
  for (const char* v : {"", "0", "false", "No", "off"}) {
    ScopedEnv e(kInsecureEnv, v);
    EXPECT_FALSE(insecure_from_env()) << v;
  }
  ScopedEnv unset(kInsecureEnv, nullptr);
  EXPECT_FALSE(insecure_from_env());
  ScopedEnv bad(kInsecureEnv, "maybe");
  EXPECT_EQ(invalid_argument_message(insecure_from_env),
            "PSCORE_INSECURE=maybe: expected 1/true/yes/on or 0/false/no/off");
}

TEST(Proofs, BindTokenNoncesJobContextAndDirection) {
  Nonce s = random_nonce(), c = random_nonce();
  EXPECT_NE(s, c);
  Binding b{"job", "ctx"};
  Proof server = server_proof("tok", s, c, b);
  Proof client = client_proof("tok", s, c, b);
  EXPECT_NE(server, client);  // one direction's proof is no good for the other
  EXPECT_EQ(server, server_proof("tok", s, c, b));
  EXPECT_NE(server, server_proof("tok2", s, c, b));
  EXPECT_NE(server, server_proof("tok", c, s, b));
  EXPECT_NE(server, server_proof("tok", s, c, Binding{"job2", "ctx"}));
  EXPECT_NE(server, server_proof("tok", s, c, Binding{"job", "ctx2"}));
  // Length prefixes: moving bytes between job id and context changes the proof.
  EXPECT_NE(server_proof("tok", s, c, Binding{"ab", "c"}),
            server_proof("tok", s, c, Binding{"a", "bc"}));
  EXPECT_TRUE(proof_matches(client, client.data(), client.size()));
  EXPECT_FALSE(proof_matches(client, server.data(), server.size()));
  EXPECT_FALSE(proof_matches(client, client.data(), client.size() - 1));
}

TEST(ServerHandshake, AcceptsTheRightProofAndNamesEachRefusal) {
  Binding b{"job", "ctx"};
  Nonce client_nonce = random_nonce();
  ServerHandshake good("tok", b, "this server");
  ASSERT_TRUE(good.on_hello(true, client_nonce).accepted);
  ASSERT_EQ(good.state(), ServerHandshake::State::kAwaitingProof);
  Proof answer = answer_challenge("tok", client_nonce, good.server_nonce(), good.server_proof(), b,
                                  "the server");
  EXPECT_TRUE(good.on_proof(answer.data(), answer.size()).accepted);
  EXPECT_EQ(good.state(), ServerHandshake::State::kDone);

  ServerHandshake wrong("tok", b, "this server");
  ASSERT_TRUE(wrong.on_hello(true, client_nonce).accepted);
  // A client with another token refuses the server's proof before proving anything.
  EXPECT_THROW(answer_challenge("other", client_nonce, wrong.server_nonce(), wrong.server_proof(),
                                b, "the server"),
               pscore::Error);
  Proof guess = client_proof("other", wrong.server_nonce(), client_nonce, b);
  auto v = wrong.on_proof(guess.data(), guess.size());
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.refusal, "wrong token: the client's proof does not match this server's token");
  EXPECT_FALSE(wrong.on_proof(guess.data(), 3).accepted);

  v = ServerHandshake("tok", b, "this server").on_hello(false, Nonce{});
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.refusal.rfind("this server requires authentication: set PSCORE_AUTH_TOKEN", 0), 0u)
      << v.refusal;
  v = ServerHandshake("", b, "this server").on_hello(true, client_nonce);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.refusal.rfind("this server has no auth token, but the client has one", 0), 0u);
  ServerHandshake open("", b, "this server");
  EXPECT_TRUE(open.on_hello(false, Nonce{}).accepted);
  EXPECT_EQ(open.state(), ServerHandshake::State::kDone);
  EXPECT_THROW(open.on_proof(answer.data(), answer.size()), pscore::NetworkError);
}

TEST(FailureLog, PrintsOncePerAddressAndCountsEverything) {
  FailureLog log("test server");
  testing::internal::CaptureStderr();
  EXPECT_TRUE(log.report("10.0.0.1:5000", "wrong token"));
  EXPECT_FALSE(log.report("10.0.0.1:5001", "wrong token"));  // same address, other port
  EXPECT_TRUE(log.report("10.0.0.2:5000", "no token"));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.failures(), 3);
  EXPECT_NE(err.find("pscore: test server: dropped connection from 10.0.0.1:5000: wrong token"),
            std::string::npos);
  EXPECT_EQ(err.find("10.0.0.1:5001"), std::string::npos);
  EXPECT_EQ(log.summary(),
            "3 connection(s) refused or failed authentication, the last from 10.0.0.2:5000: no "
            "token");
  FailureLog quiet_free("t", 0);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(quiet_free.report("::1:7", "x"));
  EXPECT_TRUE(quiet_free.report("::1:8", "x"));
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(address_of("::1:7"), "::1");
  EXPECT_EQ(FailureLog("t").summary(), "");
}

}  // namespace
}  // namespace pscore::auth

namespace pscore {
namespace {

TEST(BindPolicy, LoopbackIsFreeOtherAddressesNeedATokenOrInsecure) {
  Socket loop = Socket::listen("127.0.0.1", 0);
  EXPECT_TRUE(bound_to_loopback(loop));
  EXPECT_NO_THROW(enforce_bind_policy(loop, "127.0.0.1", false, false, "s"));
  Socket any = Socket::listen("0.0.0.0", 0);
  EXPECT_FALSE(bound_to_loopback(any));
  EXPECT_NO_THROW(enforce_bind_policy(any, "0.0.0.0", true, false, "s"));
  EXPECT_NO_THROW(enforce_bind_policy(any, "0.0.0.0", false, true, "s"));
  try {
    enforce_bind_policy(any, "", false, false, "my server");
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("my server: refusing to listen on every interface", 0),
              0u)
        << e.what();
  }
}

}  // namespace
}  // namespace pscore
