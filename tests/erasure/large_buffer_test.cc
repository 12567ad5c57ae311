// Rows over 2 GiB: ISA-L lengths are int, so the codecs cut calls into
// pieces. rs:1+1 keeps memory at two rows (~4.2 GiB); its one parity
// coefficient is 1 (Cauchy 1 / (1 XOR 0)), so parity must equal the data byte
// for byte, which memcmp checks cheaply. The row length is not a multiple of
// the piece size, so the loop also runs a short last piece.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <memory>

#include "memento/erasure/rs_codec.h"
#include "memento/erasure/xor_codec.h"

namespace memento::erasure {
namespace {

// MemAvailable from /proc/meminfo in bytes (0 if unknown). With overcommit a
// 4 GiB malloc succeeds on a small machine and the OOM killer ends the test;
// asking first turns that into a skip that says why.
uint64_t MemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

// A position-dependent pattern with no zero word, so a piece that was skipped
// (left zero) or written at the wrong offset shows up.
uint64_t Word(size_t i) { return (i * 0x9E3779B97F4A7C15ull) | 1; }

void FillPattern(uint8_t* p, size_t len) {
  size_t words = len / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w = Word(i);
    std::memcpy(p + i * 8, &w, 8);
  }
  for (size_t b = words * 8; b < len; ++b) p[b] = static_cast<uint8_t>(0xA0 + b % 7);
}

TEST(LargeBufferTest, RsEncodeAndDecodeOver2GiB) {
  const size_t len = (size_t{2} << 30) + 4099;
  if (MemAvailableBytes() < 3 * len) {
    GTEST_SKIP() << "needs ~6.5 GiB available, this machine has " << (MemAvailableBytes() >> 20)
                 << " MiB";
  }
  Buffer data(static_cast<uint8_t*>(std::malloc(len)));
  Buffer parity(static_cast<uint8_t*>(std::calloc(len, 1)));
  if (!data || !parity) GTEST_SKIP() << "cannot allocate 2 x 2 GiB";
  FillPattern(data.get(), len);

  auto codec = RsCodec::Create(1, 1);
  ASSERT_TRUE(codec.ok());
  ASSERT_EQ(codec->generator()[1], 1);
  const uint8_t* in[1] = {data.get()};
  uint8_t* out[1] = {parity.get()};
  ASSERT_TRUE(codec->Encode(in, out, len).ok());
  ASSERT_EQ(std::memcmp(parity.get(), data.get(), len), 0);

  // Lose the data row and rebuild it from the parity.
  std::memset(data.get(), 0, len);
  uint8_t* rows[2] = {data.get(), parity.get()};
  ASSERT_TRUE(codec->Decode(rows, {0}, len).ok());
  ASSERT_EQ(std::memcmp(parity.get(), data.get(), len), 0);

  // Incremental: the parity row folded with the data row becomes zero.
  ASSERT_TRUE(codec->EncodeUpdate(0, data.get(), out, len).ok());
  const uint8_t* p = parity.get();
  size_t nonzero = 0;
  for (size_t i = 0; i < len; i += 4093) nonzero += p[i] != 0;
  nonzero += p[len - 1] != 0;
  EXPECT_EQ(nonzero, 0u);
}

}  // namespace
}  // namespace memento::erasure
