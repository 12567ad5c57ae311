// Crc32cCombine (runtime/src) against crc32c of the concatenation.
#include "crc32c_combine.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "memento/erasure/crc32c.h"

namespace memento::runtime {
namespace {

TEST(Crc32cCombine, EqualsCrcOfConcatenationForRandomSplits) {
  std::mt19937_64 rng(42);
  std::vector<uint8_t> data(1 << 20);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (int trial = 0; trial < 200; ++trial) {
    const size_t total = rng() % data.size();
    const size_t cut = total == 0 ? 0 : rng() % (total + 1);
    const uint32_t a = erasure::Crc32c(data.data(), cut);
    const uint32_t b = erasure::Crc32c(data.data() + cut, total - cut);
    ASSERT_EQ(Crc32cCombine(a, b, total - cut), erasure::Crc32c(data.data(), total))
        << "total " << total << " cut " << cut;
  }
}

TEST(Crc32cCombine, FoldsManyChunksInOrder) {
  std::vector<uint8_t> data(123457);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t chunk : {1, 7, 4096, 65536}) {
    uint32_t crc = 0;
    for (size_t off = 0; off < data.size(); off += chunk) {
      const size_t n = std::min(chunk, data.size() - off);
      const uint32_t c = erasure::Crc32c(data.data() + off, n);
      crc = off == 0 ? c : Crc32cCombine(crc, c, n);
    }
    EXPECT_EQ(crc, erasure::Crc32c(data.data(), data.size())) << "chunk " << chunk;
  }
  EXPECT_EQ(Crc32cCombine(0x12345678u, 0, 0), 0x12345678u);
}

}  // namespace
}  // namespace memento::runtime
