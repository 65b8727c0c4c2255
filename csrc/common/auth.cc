#include "common/auth.h"

#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/error.h"

namespace pscore::auth {
namespace {

// Peer addresses remembered by a FailureLog; past this, entries outside the quiet period go.
constexpr size_t kMaxRememberedPeers = 4096;

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

void append_field(std::string& out, const void* data, size_t n) {
  uint32_t len = static_cast<uint32_t>(n);
  for (int i = 0; i < 4; ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  out.append(static_cast<const char*>(data), n);
}

Proof proof(const char* label, const std::string& token, const Nonce& server_nonce,
            const Nonce& client_nonce, const Binding& binding) {
  std::string msg;
  std::string l(label);
  append_field(msg, l.data(), l.size());
  append_field(msg, server_nonce.data(), server_nonce.size());
  append_field(msg, client_nonce.data(), client_nonce.size());
  append_field(msg, binding.job_id.data(), binding.job_id.size());
  append_field(msg, binding.context.data(), binding.context.size());
  return crypto::hmac_sha256(token, msg);
}

}  // namespace

std::string read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::invalid_argument(std::string(kTokenFileEnv) + "=" + path +
                                ": cannot read the token file");
  std::ostringstream content;
  content << in.rdbuf();
  std::string token = content.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty())
    throw std::invalid_argument(std::string(kTokenFileEnv) + "=" + path +
                                ": the token file is empty");
  return token;
}

std::string token_from_env() {
  std::string token = env_or_empty(kTokenEnv);
  std::string path = env_or_empty(kTokenFileEnv);
  if (path.empty()) return token;
  std::string from_file = read_token_file(path);
  bool same = token.size() == from_file.size() &&
              crypto::constant_time_equal(token.data(), from_file.data(), token.size());
  if (!token.empty() && !same)
    throw std::invalid_argument(std::string(kTokenEnv) + " and " + kTokenFileEnv + " (" + path +
                                ") hold different tokens; set only one");
  return from_file;
}

bool insecure_from_env() {
  std::string v = lower(env_or_empty(kInsecureEnv));
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  throw std::invalid_argument(std::string(kInsecureEnv) + "=" + env_or_empty(kInsecureEnv) +
                              ": expected 1/true/yes/on or 0/false/no/off");
}

Nonce random_nonce() {
  Nonce n;
  size_t got = 0;
  while (got < n.size()) {
    ssize_t k = ::getrandom(n.data() + got, n.size() - got, 0);
    if (k > 0) {
      got += static_cast<size_t>(k);
    } else if (k < 0 && errno != EINTR) {
      throw Error(errno_message("auth: getrandom", errno));
    }
  }
  return n;
}

Proof server_proof(const std::string& token, const Nonce& server_nonce, const Nonce& client_nonce,
                   const Binding& binding) {
  return proof("pscore-auth-v1 server", token, server_nonce, client_nonce, binding);
}

Proof client_proof(const std::string& token, const Nonce& server_nonce, const Nonce& client_nonce,
                   const Binding& binding) {
  return proof("pscore-auth-v1 client", token, server_nonce, client_nonce, binding);
}

bool proof_matches(const Proof& expected, const void* received, size_t nbytes) {
  if (nbytes != expected.size()) return false;
  return crypto::constant_time_equal(expected.data(), received, nbytes);
}

std::string address_of(const std::string& peer_address) {
  size_t colon = peer_address.rfind(':');
  return colon == std::string::npos ? peer_address : peer_address.substr(0, colon);
}

FailureLog::FailureLog(std::string server_name, int64_t quiet_ms)
    : server_name_(std::move(server_name)), quiet_(quiet_ms) {}

bool FailureLog::report(const std::string& peer_address, const std::string& reason) {
  auto now = std::chrono::steady_clock::now();
  std::string address = address_of(peer_address);
  std::lock_guard<std::mutex> lock(mutex_);
  ++failures_;
  last_peer_ = peer_address;
  last_reason_ = reason;
  auto it = last_printed_.find(address);
  if (it != last_printed_.end() && now - it->second < quiet_) return false;
  if (last_printed_.size() >= kMaxRememberedPeers) {
    for (auto e = last_printed_.begin(); e != last_printed_.end();)
      e = now - e->second >= quiet_ ? last_printed_.erase(e) : std::next(e);
    if (last_printed_.size() >= kMaxRememberedPeers) return false;  // a flood: stay quiet
  }
  last_printed_[address] = now;
  std::fprintf(stderr,
               "pscore: %s: dropped connection from %s: %s (further failures from %s are not "
               "logged for %lld s)\n",
               server_name_.c_str(), peer_address.c_str(), reason.c_str(), address.c_str(),
               static_cast<long long>(quiet_.count() / 1000));
  std::fflush(stderr);
  return true;
}

int64_t FailureLog::failures() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failures_;
}

std::string FailureLog::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failures_ == 0) return "";
  return std::to_string(failures_) + " connection(s) refused or failed authentication, the " +
         "last from " + last_peer_ + ": " + last_reason_;
}

}  // namespace pscore::auth
