// Crc32cCombine (runtime/src) against crc32c of the concatenation.
#include "snapshot/crc32c_combine.h"

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

// Lengths far beyond what a test can hash: combining is associative (for
// non-empty parts; an empty part has crc 0 and is the identity), so
// (a+b)+c and a+(b+c) must agree for any lengths, up to 2^60 bytes; and a
// 256 MiB run of zeros (hashed for real) appended in one combine or in 64
// combines of 4 MiB gives the same crc as hashing it.
TEST(Crc32cCombine, LargeLengthsAreConsistent) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const uint32_t a = static_cast<uint32_t>(rng()), b = static_cast<uint32_t>(rng()),
                   c = static_cast<uint32_t>(rng());
    const uint64_t lb = 1 + (rng() >> (4 + rng() % 60)), lc = 1 + (rng() >> (4 + rng() % 60));
    ASSERT_EQ(Crc32cCombine(Crc32cCombine(a, b, lb), c, lc),
              Crc32cCombine(a, Crc32cCombine(b, c, lc), lb + lc))
        << "lb " << lb << " lc " << lc;
  }
  const size_t chunk = 4 << 20;
  std::vector<uint8_t> zeros(chunk, 0);
  const uint32_t head = erasure::Crc32c(reinterpret_cast<const uint8_t*>("memento"), 7);
  erasure::Crc32cStream whole;
  whole.Update(reinterpret_cast<const uint8_t*>("memento"), 7);
  uint32_t folded = head;
  const uint32_t zero_chunk = erasure::Crc32c(zeros.data(), chunk);
  for (int i = 0; i < 64; ++i) {
    whole.Update(zeros.data(), chunk);
    folded = Crc32cCombine(folded, zero_chunk, chunk);
  }
  EXPECT_EQ(folded, whole.value());
  uint32_t zeros_crc = zero_chunk;
  for (int i = 1; i < 64; ++i) zeros_crc = Crc32cCombine(zeros_crc, zero_chunk, chunk);
  EXPECT_EQ(Crc32cCombine(head, zeros_crc, 64ull * chunk), whole.value());
}

}  // namespace
}  // namespace memento::runtime
