// The wire codec (common/wire_codec.h): exact little-endian bytes, round trips into every buffer
// type, every truncation point rejected naming its field, oversized lengths and counts rejected
// before anything is allocated, trailing bytes, alignment.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "common/wire_codec.h"

namespace pscore {
namespace {

#pragma pack(push, 1)
struct Packed {
  uint8_t a;
  uint64_t b;
};
#pragma pack(pop)

// The message of the NetworkError fn throws ("" when it throws none).
template <typename Fn>
std::string network_error(Fn fn) {
  try {
    fn();
  } catch (const NetworkError& e) {
    return e.what();
  }
  return "";
}

TEST(WireCodec, FieldsAreLittleEndianAndStringsU32Prefixed) {
  std::string out = WireWriter<>()
                        .u8(0x01)
                        .u16(0x0203)
                        .u32(0x04050607)
                        .u64(0x08090a0b0c0d0e0full)
                        .i32(-2)
                        .string("hi")
                        .bytes("xyz", 3)
                        .take();
  const std::string expected(
      "\x01"
      "\x03\x02"
      "\x07\x06\x05\x04"
      "\x0f\x0e\x0d\x0c\x0b\x0a\x09\x08"
      "\xfe\xff\xff\xff"
      "\x02\x00\x00\x00hi"
      "xyz",
      1 + 2 + 4 + 8 + 4 + 6 + 3);
  EXPECT_EQ(out, expected);
}

TEST(WireCodec, RoundTripsEveryFieldIntoEveryBuffer) {
  auto write = [](auto& w) {
    w.u8(250).u16(65000).u32(4000000000u).u64(~0ull).i32(-7).i64(-(int64_t{1} << 40));
    w.f32(1.5f).f64(-2.25).string("name").string("").record(Packed{9, 77});
    const int64_t ids[3] = {1, -2, 3};
    w.bytes(ids, sizeof(ids));
  };
  std::string s;
  WireWriter sw(s);
  write(sw);
  std::vector<uint8_t> v;
  WireWriter vw(v);
  write(vw);
  WireWriter<> owned;
  write(owned);
  ASSERT_EQ(std::string(v.begin(), v.end()), s);
  ASSERT_EQ(owned.out(), s);

  WireReader r(s.data(), s.size(), "test payload");
  EXPECT_EQ(r.u8("a"), 250);
  EXPECT_EQ(r.u16("b"), 65000);
  EXPECT_EQ(r.u32("c"), 4000000000u);
  EXPECT_EQ(r.u64("d"), ~0ull);
  EXPECT_EQ(r.i32("e"), -7);
  EXPECT_EQ(r.i64("f"), -(int64_t{1} << 40));
  EXPECT_EQ(r.f32("g"), 1.5f);
  EXPECT_EQ(r.f64("h"), -2.25);
  EXPECT_EQ(r.string("i"), "name");
  EXPECT_EQ(r.string("j"), "");
  Packed p = r.record<Packed>("k");
  EXPECT_EQ(p.a, 9);
  EXPECT_EQ(p.b, 77u);
  EXPECT_EQ(r.vector<int64_t>(3, "ids"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(r.remaining(), 0u);
  r.finish();
}

// A payload of one field of each kind, and the field each byte belongs to.
struct Layout {
  std::string bytes;
  std::vector<const char*> owner;  // owner[i]: the field byte i belongs to
};

Layout one_of_each() {
  Layout l;
  auto add = [&](const std::string& b, const char* field) {
    l.bytes += b;
    l.owner.insert(l.owner.end(), b.size(), field);
  };
  add(WireWriter<>().u8(1).take(), "flag");
  add(WireWriter<>().u32(7).take(), "count");
  add(WireWriter<>().i64(-5).take(), "step");
  add(WireWriter<>().u32(3).take(), "name");  // the string's length prefix ...
  add("abc", "name");                         // ... and its bytes name the same field
  add(WireWriter<>().f64(0.5).take(), "lr");
  add(WireWriter<>().record(Packed{1, 2}).take(), "header");
  return l;
}

void read_one_of_each(WireReader& r) {
  r.u8("flag");
  r.u32("count");
  r.i64("step");
  r.string("name");
  r.f64("lr");
  r.record<Packed>("header");
  r.finish();
}

TEST(WireCodec, EveryTruncationPointIsRejectedNamingItsField) {
  const Layout l = one_of_each();
  {
    WireReader whole(l.bytes.data(), l.bytes.size(), "test payload");
    read_one_of_each(whole);
  }
  for (size_t cut = 0; cut < l.bytes.size(); ++cut) {
    // A copy of exactly `cut` bytes, so ASan sees any read past them.
    std::vector<uint8_t> prefix(l.bytes.begin(), l.bytes.begin() + cut);
    const std::string error = network_error([&] {
      WireReader r(prefix.data(), prefix.size(), "peer 7 request");
      read_one_of_each(r);
    });
    ASSERT_FALSE(error.empty()) << "cut " << cut;
    EXPECT_EQ(error.rfind("peer 7 request: malformed payload: ", 0), 0u) << error;
    EXPECT_NE(error.find(std::string(l.owner[cut]) + " needs "), std::string::npos)
        << "cut " << cut << ": " << error;
    EXPECT_NE(error.find(" of " + std::to_string(cut) + ","), std::string::npos) << error;
  }
}

TEST(WireCodec, TrailingBytesAreAnError) {
  std::string s = WireWriter<>().u32(1).u8(0).u8(0).take();
  WireReader r(s.data(), s.size(), "reply");
  r.u32("value");
  EXPECT_EQ(network_error([&] { r.finish(); }),
            "reply: malformed payload: 2 trailing bytes after offset 4 of 6");
}

TEST(WireCodec, OversizedLengthsAndCountsAreRejectedBeforeAllocating) {
  // A string claiming 4 GiB in a 6-byte payload.
  std::string s = WireWriter<>().u32(0xffffffffu).bytes("ab", 2).take();
  WireReader r1(s.data(), s.size(), "hello");
  EXPECT_NE(network_error([&] { r1.string("job id"); }).find("job id needs 4294967295 bytes"),
            std::string::npos);
  // A string over its field's cap, though the payload holds it.
  std::string t = WireWriter<>().string("abcdef").take();
  WireReader r2(t.data(), t.size(), "hello");
  EXPECT_EQ(network_error([&] { r2.string("job id", 4); }),
            "hello: malformed payload: job id of 6 bytes exceeds the cap of 4");
  // Counts whose byte size would overflow 64 bits.
  std::string u(16, '\0');
  WireReader r3(u.data(), u.size(), "push");
  EXPECT_NE(network_error([&] { r3.array<int64_t>(uint64_t{1} << 62, "ids"); }).find("ids: "),
            std::string::npos);
  EXPECT_NE(network_error([&] { r3.vector<float>(~uint64_t{0}, "gradients"); }).find("gradients"),
            std::string::npos);
  EXPECT_EQ(r3.position(), 0u);  // nothing was consumed
  // The writer refuses a string over its cap.
  EXPECT_THROW(WireWriter<>().string("abcdef", "store: key", 5), std::invalid_argument);
  try {
    WireWriter<>().string("abcdef", "store: key", 5);
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "store: key of 6 bytes exceeds the cap of 5");
  }
}

TEST(WireCodec, ArraysInPlaceNeedAlignmentCopiesDoNot) {
  alignas(8) uint8_t buf[1 + 2 * sizeof(int64_t)] = {};
  const int64_t values[2] = {11, -12};
  std::memcpy(buf + 1, values, sizeof(values));
  WireReader r(buf, sizeof(buf), "record");
  r.u8("kind");
  EXPECT_NE(
      network_error([&] { r.array<int64_t>(2, "ids"); }).find("ids at offset 1 is not aligned"),
      std::string::npos);
  EXPECT_EQ(r.position(), 1u);
  EXPECT_EQ(r.vector<int64_t>(2, "ids"), (std::vector<int64_t>{11, -12}));

  WireReader aligned(buf, sizeof(buf), "record");
  aligned.raw(1, "kind");
  EXPECT_EQ(aligned.array<int64_t>(0, "none"), reinterpret_cast<const int64_t*>(buf + 1));
}

// The context is kept by reference: a temporary string, which would dangle, does not compile.
static_assert(!std::is_constructible_v<WireReader, const char*, size_t, std::string>);
static_assert(std::is_constructible_v<WireReader, const char*, size_t, const std::string&>);
static_assert(std::is_constructible_v<WireReader, const char*, size_t, const char*>);

TEST(WireCodec, RestTakesWhatIsLeft) {
  std::string s = WireWriter<>().i32(3).bytes("job-a", 5).take();
  WireReader r(s.data(), s.size(), "hello");
  EXPECT_EQ(r.i32("rank"), 3);
  EXPECT_EQ(r.rest(), "job-a");
  EXPECT_EQ(r.remaining(), 0u);
  r.finish();
}

}  // namespace
}  // namespace pscore
