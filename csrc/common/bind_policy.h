// The rule every pscore server checks before it accepts connections: a loopback bind is always
// allowed; an address other hosts can reach needs an auth token, or an explicit insecure opt-in.
#pragma once

#include <string>

#include "common/socket.h"

namespace pscore {

// True when the listening socket is bound to a loopback address (127.0.0.0/8, ::1, or an
// IPv4-mapped 127.x address), i.e. only this host can connect.
bool bound_to_loopback(const Socket& listener);

// Throws std::invalid_argument naming `server` and `host` when the listener is reachable from
// other hosts while there is no token and insecure is false. `host` is what the user asked to
// bind ("" = every interface).
void enforce_bind_policy(const Socket& listener, const std::string& host, bool has_token,
                         bool insecure, const std::string& server);

}  // namespace pscore
