#include "store/store_errors.h"

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

namespace pscore {
namespace {

constexpr size_t kMaxKeysNamed = 16;

std::string printable(const std::string& key) {
  std::string out;
  for (unsigned char c : key) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace

std::string printable_key(const std::string& key) { return printable(key); }

std::string format_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kMaxKeysNamed; ++i) {
    if (i) out += ", ";
    out += "'" + printable(keys[i]) + "'";
  }
  if (keys.size() > kMaxKeysNamed)
    out += " and " + std::to_string(keys.size() - kMaxKeysNamed) + " more";
  return out;
}

std::string wait_timeout_message(const std::string& who, int64_t timeout_ms,
                                 const std::vector<std::string>& missing) {
  return who + ": wait timed out after " + std::to_string(timeout_ms) +
         " ms; keys still missing: " + format_keys(missing);
}

std::string get_timeout_message(const std::string& who, const std::string& key,
                                int64_t timeout_ms) {
  return who + ": get('" + printable(key) + "') timed out after " + std::to_string(timeout_ms) +
         " ms: key '" + printable(key) + "' was never set";
}

int64_t parse_stored_integer(const std::string& key, const std::string& value) {
  const char* begin = value.c_str();
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(begin, &end, 10);
  if (value.empty() || end != begin + value.size() || errno == ERANGE)
    throw std::invalid_argument("add: key '" + printable(key) + "' holds '" +
                                printable(value.substr(0, 64)) + "', which is not an integer");
  return static_cast<int64_t>(v);
}

}  // namespace pscore
