#include "common/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace pscore {

namespace {

// The last-level cache one core shares, as sysfs has it ("32768K"); 0 when unknown. (sysconf's
// _SC_LEVEL3_CACHE_SIZE can report a whole socket's, several caches.)
size_t last_level_cache_bytes() {
  for (int index = 3; index >= 2; --index) {
    const std::string path =
        "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size";
    std::ifstream in(path);
    size_t value = 0;
    std::string unit;
    if (!(in >> value)) continue;
    in >> unit;
    return unit == "K" ? value << 10 : unit == "M" ? value << 20 : value;
  }
  return 0;
}

}  // namespace

size_t stream_copy_bytes() {
  static const size_t bytes = [] {
    const size_t cache = last_level_cache_bytes();
    return cache > 0 ? std::max(cache / 4, size_t{1} << 20) : size_t{8} << 20;
  }();
  return bytes;
}

#if defined(__x86_64__)
void copy_streaming(void* dst, const void* src, size_t nbytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const size_t head = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;  // streams need 16-aligned
  if (nbytes < head + 64) {
    std::memcpy(d, s, nbytes);
    return;
  }
  std::memcpy(d, s, head);
  d += head;
  s += head;
  nbytes -= head;
  for (; nbytes >= 64; d += 64, s += 64, nbytes -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, nbytes);
  _mm_sfence();
}
#else
void copy_streaming(void* dst, const void* src, size_t nbytes) { std::memcpy(dst, src, nbytes); }
#endif

}  // namespace pscore
