#include "ps/storage/seq_window.h"

#include <stdexcept>

namespace pscore::ps {

std::string SeqWindow::bits_hex() const {
  static const char* kDigits = "0123456789abcdef";
  std::string out(kBits / 4, '0');
  for (uint64_t i = 0; i < kBits; i += 4) {
    int v = (seen_[i] ? 1 : 0) | (seen_[i + 1] ? 2 : 0) | (seen_[i + 2] ? 4 : 0) |
            (seen_[i + 3] ? 8 : 0);
    out[i / 4] = kDigits[v];
  }
  return out;
}

void SeqWindow::restore(uint64_t high, const std::string& hex) {
  high_ = high;
  if (hex.empty()) {
    seen_.set();
    return;
  }
  if (hex.size() != kBits / 4) throw std::invalid_argument("sequence window of the wrong size");
  for (uint64_t i = 0; i < kBits / 4; ++i) {
    char c = hex[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) throw std::invalid_argument("sequence window is not hex");
    for (int b = 0; b < 4; ++b) seen_[4 * i + b] = (v >> b) & 1;
  }
}

}  // namespace pscore::ps
