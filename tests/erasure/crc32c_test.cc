#include "memento/erasure/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace memento::erasure {
namespace {

// Bitwise reference (reflected polynomial 0x82F63B78).
uint32_t ReferenceCrc32c(const unsigned char* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int b = 0; b < 8; ++b) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

TEST(Crc32cTest, KnownVector) {
  const char* s = "123456789";
  EXPECT_EQ(Crc32c(s, 9), 0xE3069283u);
  EXPECT_EQ(Crc32c(s, 0), 0u);
}

TEST(Crc32cTest, MatchesReferenceForOddLengthsAndUnalignedPointers) {
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(5000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t off = 0; off < 9; ++off) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{3}, size_t{63}, size_t{64}, size_t{65},
                       size_t{1023}, size_t{4097}}) {
      EXPECT_EQ(Crc32c(buf.data() + off, len), ReferenceCrc32c(buf.data() + off, len))
          << "off=" << off << " len=" << len;
    }
  }
}

TEST(Crc32cTest, StreamingEqualsOneShotForEverySplit) {
  std::mt19937 rng(11);
  std::vector<unsigned char> buf(777);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  const uint32_t whole = Crc32c(buf.data(), buf.size());
  for (size_t cut = 0; cut <= buf.size(); cut += 37) {
    Crc32cStream s;
    s.Update(buf.data(), cut);
    s.Update(buf.data() + cut, buf.size() - cut);
    EXPECT_EQ(s.value(), whole) << "cut=" << cut;
  }
  Crc32cStream s;
  s.Update(buf.data(), 10);
  s.Reset();
  s.Update(buf.data(), buf.size());
  EXPECT_EQ(s.value(), whole);
}

// UpdateCopy copies exactly the bytes asked for (nothing before dst or past
// its end) and hashes them as Update does, for sizes around its piece (256
// KiB) and its 64-byte store loop, with source and destination at every
// alignment to 16 bytes, and continues a stream already begun.
TEST(Crc32cTest, UpdateCopyCopiesAndHashesLikeMemcpyThenUpdate) {
  std::mt19937 rng(13);
  const size_t piece = size_t{256} << 10;
  std::vector<unsigned char> src(2 * piece + 4096);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  for (size_t len : {size_t{0}, size_t{1}, size_t{15}, size_t{63}, size_t{64}, size_t{65},
                     size_t{127}, size_t{4099}, piece - 1, piece, piece + 1, 2 * piece + 77}) {
    for (size_t src_off : {size_t{0}, size_t{5}}) {
      for (size_t dst_off = 0; dst_off < 16; dst_off += 3) {
        std::vector<unsigned char> dst(len + 64, 0xC3);
        Crc32cStream copied;
        copied.Update(src.data(), 7);  // a stream already under way
        copied.UpdateCopy(dst.data() + dst_off, src.data() + src_off, len);
        Crc32cStream expected;
        expected.Update(src.data(), 7);
        expected.Update(src.data() + src_off, len);
        const std::string at = "len=" + std::to_string(len) +
                               " src_off=" + std::to_string(src_off) +
                               " dst_off=" + std::to_string(dst_off);
        EXPECT_EQ(copied.value(), expected.value()) << at;
        EXPECT_EQ(std::memcmp(dst.data() + dst_off, src.data() + src_off, len), 0) << at;
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xC3) << at << " before, i=" << i;
        for (size_t i = dst_off + len; i < dst.size(); ++i) {
          ASSERT_EQ(dst[i], 0xC3) << at << " after, i=" << i;
        }
      }
    }
  }
}

TEST(Crc32cTest, DetectsEverySingleBitFlip) {
  std::vector<unsigned char> buf(64, 0x5A);
  const uint32_t good = Crc32c(buf.data(), buf.size());
  for (size_t i = 0; i < buf.size() * 8; ++i) {
    buf[i / 8] ^= static_cast<unsigned char>(1u << (i % 8));
    EXPECT_NE(Crc32c(buf.data(), buf.size()), good) << "bit " << i;
    buf[i / 8] ^= static_cast<unsigned char>(1u << (i % 8));
  }
}

}  // namespace
}  // namespace memento::erasure
