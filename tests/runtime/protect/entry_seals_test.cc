// Entry seals: the record's encoding, and checking a rebuilt shard against it.
#include "protect/entry_seals.h"

#include <gtest/gtest.h>

#include "memento/erasure/crc32c.h"

namespace memento::runtime {
namespace {

std::vector<EntrySeal> SealsOf(const std::vector<uint8_t>& shard,
                               const std::vector<uint64_t>& sizes) {
  std::vector<EntrySeal> seals;
  uint64_t at = 0;
  for (uint64_t n : sizes) {
    seals.push_back({n, erasure::Crc32c(shard.data() + at, n)});
    at += n;
  }
  return seals;
}

TEST(EntrySeals, RoundTripAndMalformedRecords) {
  const std::vector<EntrySeal> seals = {{10, 0xdeadbeef}, {0, 0}, {1u << 20, 7}};
  std::vector<uint8_t> record = EncodeEntrySeals(seals);
  ASSERT_EQ(record.size(), EntrySealsBytes(3));
  auto back = DecodeEntrySeals(record.data(), record.size());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*back)[i].bytes, seals[i].bytes);
    EXPECT_EQ((*back)[i].crc, seals[i].crc);
  }
  EXPECT_FALSE(DecodeEntrySeals(record.data(), record.size() - 1).ok());  // count disagrees
  record[0] ^= 1;
  auto bad = DecodeEntrySeals(record.data(), record.size());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("malformed"), std::string::npos);
}

TEST(EntrySeals, ARebuiltShardIsCheckedEntryByEntryAndEachFailureNamed) {
  std::vector<uint8_t> shard(300);
  for (size_t i = 0; i < shard.size(); ++i) shard[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint64_t> sizes = {100, 150, 50};
  const std::vector<std::string> names = {"a", "b", "c"};
  const std::vector<EntrySeal> seals = SealsOf(shard, sizes);
  EXPECT_TRUE(VerifyShardAgainstSeals(shard, sizes, names, seals).ok());

  std::vector<uint8_t> damaged = shard;
  damaged[120] ^= 0x10;
  Status s = VerifyShardAgainstSeals(damaged, sizes, names, seals);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("rebuilt entry 'b' fails the end-to-end check"), std::string::npos)
      << s.ToString();

  // A shard rebuilt short: the entry past its end is named, not said to
  // differ in size from itself.
  std::vector<uint8_t> short_shard(shard.begin(), shard.begin() + 260);
  s = VerifyShardAgainstSeals(short_shard, sizes, names, seals);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("rebuilt entry 'c' of 50 bytes lies beyond the end"),
            std::string::npos)
      << s.ToString();

  std::vector<EntrySeal> resized = seals;
  resized[0].bytes = 99;
  s = VerifyShardAgainstSeals(shard, sizes, names, resized);
  EXPECT_NE(s.message().find("rebuilt entry 'a': owner sealed 99 bytes, expected 100"),
            std::string::npos)
      << s.ToString();
  s = VerifyShardAgainstSeals(shard, {100, 150}, {"a", "b"}, seals);
  EXPECT_NE(s.message().find("owner sealed 3 entries, this rank registered 2"), std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace memento::runtime
