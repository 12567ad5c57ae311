#include "memento/erasure/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
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
