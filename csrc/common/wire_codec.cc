#include "common/wire_codec.h"

#include <stdexcept>

#include "common/error.h"

namespace pscore {

void wire_string_too_long(const char* field, size_t n, uint64_t max_len) {
  if (max_len > std::numeric_limits<uint32_t>::max())
    max_len = std::numeric_limits<uint32_t>::max();
  throw std::invalid_argument(std::string(field) + " of " + std::to_string(n) +
                              " bytes exceeds the cap of " + std::to_string(max_len));
}

void WireReader::fail(const std::string& why) const {
  throw NetworkError(std::string(context_) + ": malformed payload: " + why);
}

void WireReader::truncated(const char* field, uint64_t n) const {
  fail(std::string(field) + " needs " + std::to_string(n) + " bytes at offset " +
       std::to_string(pos_) + " of " + std::to_string(size_) + ", " + std::to_string(remaining()) +
       " left");
}

void WireReader::short_array(const char* field, uint64_t count, size_t elem_bytes) const {
  fail(std::string(field) + ": " + std::to_string(count) + " elements of " +
       std::to_string(elem_bytes) + " bytes at offset " + std::to_string(pos_) + " of " +
       std::to_string(size_) + ", " + std::to_string(remaining()) + " bytes left");
}

void WireReader::misaligned(const char* field, size_t alignment) const {
  fail(std::string(field) + " at offset " + std::to_string(pos_) + " is not aligned to " +
       std::to_string(alignment) + " bytes");
}

void WireReader::too_long(const char* field, uint64_t n, uint64_t max_len) const {
  fail(std::string(field) + " of " + std::to_string(n) + " bytes exceeds the cap of " +
       std::to_string(max_len));
}

void WireReader::trailing() const {
  fail(std::to_string(remaining()) + " trailing bytes after offset " + std::to_string(pos_) +
       " of " + std::to_string(size_));
}

}  // namespace pscore
