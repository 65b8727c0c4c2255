#include "common/error.h"

#include <cstring>

namespace pscore {

std::string errno_message(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

}  // namespace pscore
