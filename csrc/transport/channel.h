// A non-blocking duplex byte stream to one peer on one lane; the collectives' engine drives it.
#pragma once

#include <cstddef>
#include <functional>

namespace pscore {

// Where received bytes go: straight into `direct` when set (a copy at most), else handed in place
// to `consume` (e.g. to reduce from the medium into the destination without a staging copy).
struct Sink {
  void* direct = nullptr;
  std::function<void(const void* src, size_t nbytes)> consume;
};

class Channel {
 public:
  virtual ~Channel() = default;
  // Takes up to na bytes of a then nb bytes of b; returns how many it took (0 when full).
  // Throws NetworkError when the peer is gone.
  virtual size_t write_some(const void* a, size_t na, const void* b, size_t nb) = 0;
  // Hands at most `max` arrived bytes to the sink, always a multiple of `granule` (a power of two
  // <= 8 that divides max); returns how many. Throws NetworkError when the peer is gone.
  virtual size_t read_some(size_t max, size_t granule, const Sink& sink) = 0;
  // Copies up to n arrived bytes to dst without consuming them; returns how many. Throws
  // NetworkError when the peer is gone and nothing more will arrive.
  virtual size_t peek(void* dst, size_t n) = 0;
};

}  // namespace pscore
