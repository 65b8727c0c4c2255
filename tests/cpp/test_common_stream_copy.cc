// copy_streaming keeps memcpy's result at every alignment of either end and every length around
// its 64-byte steps; the threshold is a sane size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/stream_copy.h"

namespace pscore {
namespace {

TEST(StreamCopy, CopiesExactlyAtEveryAlignmentAndLength) {
  std::vector<uint8_t> src(4096 + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> dst(src.size() + 64);
  for (size_t src_off = 0; src_off < 17; ++src_off)
    for (size_t dst_off = 0; dst_off < 17; ++dst_off)
      for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{63}, size_t{64}, size_t{79},
                       size_t{80}, size_t{127}, size_t{128}, size_t{1000}, size_t{4096}}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        copy_streaming(dst.data() + dst_off, src.data() + src_off, n);
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xEE) << "before, n " << n;
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(dst[dst_off + i], src[src_off + i])
              << "byte " << i << " of " << n << ", offsets " << src_off << "/" << dst_off;
        ASSERT_EQ(dst[dst_off + n], 0xEE) << "after, n " << n;
      }
}

TEST(StreamCopy, CopiesALargeBufferExactly) {
  std::vector<uint32_t> src((size_t{9} << 20) / 4), dst(src.size() + 1, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint32_t>(i * 2654435761u);
  copy_streaming(reinterpret_cast<char*>(dst.data()) + 4, src.data(), src.size() * 4);
  for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(dst[i + 1], src[i]) << i;
}

TEST(StreamCopy, ThresholdIsAtLeastAMegabyte) {
  EXPECT_GE(stream_copy_bytes(), size_t{1} << 20);
  EXPECT_LE(stream_copy_bytes(), size_t{1} << 30);
}

}  // namespace
}  // namespace pscore
