// Shared wording for store failures, so every store names keys and timeouts the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pscore {

// The key with bytes outside printable ASCII written as \xNN.
std::string printable_key(const std::string& key);
// "'a', 'b', 'c'" (at most 16 keys, then "and N more").
std::string format_keys(const std::vector<std::string>& keys);
// Message for a wait that ran out: "<who>: wait timed out after T ms; keys still missing: ...".
std::string wait_timeout_message(const std::string& who, int64_t timeout_ms,
                                 const std::vector<std::string>& missing);
// Message for a get that ran out: "<who>: get('k') timed out after T ms: key 'k' was never set".
std::string get_timeout_message(const std::string& who, const std::string& key, int64_t timeout_ms);
// Parses a stored value as the integer add() keeps; throws std::invalid_argument naming key.
int64_t parse_stored_integer(const std::string& key, const std::string& value);

}  // namespace pscore
