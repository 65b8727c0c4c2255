#include "common/bind_policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <stdexcept>

namespace pscore {

bool bound_to_loopback(const Socket& listener) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  if (ss.ss_family == AF_INET) {
    auto* sa = reinterpret_cast<const sockaddr_in*>(&ss);
    return (ntohl(sa->sin_addr.s_addr) >> 24) == 127;
  }
  if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

void enforce_bind_policy(const Socket& listener, const std::string& host, bool has_token,
                         bool insecure, const std::string& server) {
  if (has_token || insecure || bound_to_loopback(listener)) return;
  std::string where = host.empty() ? "every interface" : "'" + host + "'";
  throw std::invalid_argument(
      server + ": refusing to listen on " + where +
      " (reachable from other hosts) without an auth token: set PSCORE_AUTH_TOKEN (or " +
      "PSCORE_AUTH_TOKEN_FILE) to the same secret on every process, bind a loopback address, " +
      "or pass insecure=True (--insecure for pscore-store and pserver) / PSCORE_INSECURE=1 to "
      "accept unauthenticated connections");
}

}  // namespace pscore
