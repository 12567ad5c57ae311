// Shard I/O of a restore. LandedCopy: pieces of a landing shard copied into
// the buffers in any order, from several threads, give the same buffers and
// crc32c as one pass; a gap or an overlap is reported, never a wrong crc.
// ReadShardRange: a range of the shard out of a sealed slot. CopySlotToBuffers:
// the own slot into the buffers, hashed in parallel pieces. Behind: a
// survivor's own copy at a lower priority than its node's transfers.
#include "recovery/shard_io.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "memento/erasure/crc32c.h"
#include "memento/runtime/node_store.h"
#include "store/store_test_util.h"

namespace memento::runtime {
namespace {

struct Shard {
  explicit Shard(const std::vector<uint64_t>& sizes) : landed(ShardLanding::InMemory(sizes)) {
    buffers.reserve(sizes.size());  // entries point into them
    for (size_t i = 0; i < sizes.size(); ++i) {
      buffers.emplace_back(sizes[i], 0);
      entries.push_back(
          {"e" + std::to_string(i), buffers.back().data(), sizes[i], {}, kHostMemory});
    }
    bytes.resize(landed.size());
    for (uint64_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
    landed.Write(0, bytes.data(), bytes.size());
  }
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<RegisteredEntry> entries;
  ShardLanding landed;
  std::vector<uint8_t> bytes;  // the whole shard
};

// [off, len) pieces of `piece` bytes covering `size`, shuffled.
std::vector<std::pair<uint64_t, uint64_t>> Pieces(uint64_t size, uint64_t piece) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (uint64_t off = 0; off < size; off += piece)
    out.push_back({off, std::min(piece, size - off)});
  std::shuffle(out.begin(), out.end(), std::mt19937(42));
  return out;
}

TEST(LandedCopy, PiecesInAnyOrderOnAnyThreadGiveTheOnePassCrcs) {
  const std::vector<uint64_t> sizes = {10000, 0, 333333, 1, 4096};
  Shard s(sizes);
  StagedCopierPool copiers;  // host buffers: never used
  LandedCopy copy(&s.entries, &s.landed, &copiers);
  const auto pieces = Pieces(s.landed.size(), 4096);  // many straddle two entries
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < pieces.size(); i += 3) copy.Piece(pieces[i].first, pieces[i].second);
    });
  }
  for (auto& th : threads) th.join();
  std::vector<uint32_t> crcs;
  uint32_t whole = 0;
  ASSERT_TRUE(copy.Finish(&crcs, &whole));
  EXPECT_EQ(whole, erasure::Crc32c(s.bytes.data(), s.bytes.size()));
  uint64_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(crcs[i], erasure::Crc32c(s.bytes.data() + at, sizes[i])) << "entry " << i;
    EXPECT_TRUE(std::equal(s.buffers[i].begin(), s.buffers[i].end(), s.bytes.begin() + at))
        << "entry " << i;
    at += sizes[i];
  }
}

TEST(LandedCopy, AGapOrAnOverlapIsNotComplete) {
  const std::vector<uint64_t> sizes = {5000, 7000};
  for (int mode = 0; mode < 4; ++mode) {
    Shard s(sizes);
    StagedCopierPool copiers;
    LandedCopy copy(&s.entries, &s.landed, &copiers);
    auto pieces = Pieces(s.landed.size(), 1000);
    if (mode == 0) pieces.pop_back();                       // a gap
    if (mode == 1) pieces.push_back(pieces.front());        // a piece twice
    if (mode == 2) pieces.push_back({s.landed.size(), 1});  // past the end
    if (mode == 3) {  // the shard's last piece: a gap at the end
      pieces.erase(std::max_element(pieces.begin(), pieces.end()));
    }
    for (const auto& [off, len] : pieces) copy.Piece(off, len);
    std::vector<uint32_t> crcs;
    uint32_t whole = 0;
    EXPECT_FALSE(copy.Finish(&crcs, &whole)) << "mode " << mode;
  }
}

// A store of one region per size whose slot for v1 holds `shard` (the
// entries' bytes back to back), sealed; the slot in *slot.
void SealedV1(const std::string& job, const std::vector<uint64_t>& sizes,
              const std::vector<uint8_t>& shard, std::optional<NodeStore>* store, int* slot) {
  StoreLayout layout;
  for (size_t i = 0; i < sizes.size(); ++i) {
    RegionSpec r;
    r.name = "e" + std::to_string(i);
    r.capacity = sizes[i];
    layout.regions.push_back(r);
  }
  auto created = NodeStore::Create({job, "n", 0}, layout, 2);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  store->emplace(std::move(*created));
  auto begun = (*store)->BeginWrite(1, 0);
  ASSERT_TRUE(begun.ok()) << begun.status().ToString();
  *slot = *begun;
  uint64_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > 0) {
      std::memcpy((*store)->MutableRegion(*slot, static_cast<int>(i)), &shard[at], sizes[i]);
    }
    ASSERT_TRUE((*store)
                    ->SealRegion(*slot, static_cast<int>(i), sizes[i],
                                 erasure::Crc32c(&shard[at], sizes[i]))
                    .ok());
    at += sizes[i];
  }
  ASSERT_TRUE((*store)->SealSlot(*slot, 1).ok());
}

// A range of the shard read out of a sealed slot: entries concatenated, an
// empty entry skipped, and only what lies past the last entry (stripe
// padding) zero-filled, whatever the buffer held before.
TEST(ReadShardRange, CopiesTheEntriesAndZeroesOnlyPastTheEnd) {
  testing::JobCleaner cleaner(testing::UniqueJob("range"));
  const std::vector<uint64_t> sizes = {5000, 0, 3000};
  std::vector<uint8_t> shard(8000);
  for (size_t i = 0; i < shard.size(); ++i) shard[i] = static_cast<uint8_t>(i * 7 + 1);
  std::optional<NodeStore> store;
  int slot = -1;
  SealedV1(cleaner.job(), sizes, shard, &store, &slot);
  if (HasFatalFailure()) return;
  // Across the empty entry and 1000 bytes past the end.
  std::vector<uint8_t> dst(5000, 0xAA);
  ASSERT_TRUE(ReadShardRange(*store, slot, sizes, 4000, dst.size(), dst.data()).ok());
  EXPECT_TRUE(std::equal(dst.begin(), dst.begin() + 4000, shard.begin() + 4000));
  EXPECT_TRUE(std::all_of(dst.begin() + 4000, dst.end(), [](uint8_t b) { return b == 0; }));
  // Wholly past the end: all zero, and nothing written past the range.
  std::fill(dst.begin(), dst.end(), 0xAA);
  ASSERT_TRUE(ReadShardRange(*store, slot, sizes, 9000, 100, dst.data()).ok());
  EXPECT_TRUE(std::all_of(dst.begin(), dst.begin() + 100, [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(dst[100], 0xAA);
  std::vector<uint8_t> all(8000, 0xAA);
  ASSERT_TRUE(ReadShardRange(*store, slot, sizes, 0, all.size(), all.data()).ok());
  EXPECT_EQ(all, shard);
}

// A restore from the rank's own slot hashes it in pieces on several threads:
// entries of many pieces (one ending in an odd tail, one of exactly one
// piece), an empty one and a one-byte one come back bit-exact with their
// sealed crc32c, and a byte damaged in the middle of a long entry's third
// piece is a Corruption naming that entry and the crc it found.
TEST(CopySlotToBuffers, EntriesOfManyPiecesComeBackAndADamagedPieceIsNamed) {
  testing::JobCleaner cleaner(testing::UniqueJob("slotcopy"));
  const std::vector<uint64_t> sizes = {(9u << 20) + 3, 0, 1, 4u << 20};
  std::vector<std::vector<uint8_t>> want;
  std::vector<uint8_t> shard;
  for (size_t i = 0; i < sizes.size(); ++i) {
    want.push_back(testing::Pattern(sizes[i], static_cast<uint32_t>(i + 1)));
    shard.insert(shard.end(), want[i].begin(), want[i].end());
  }
  std::optional<NodeStore> store;
  int slot = -1;
  SealedV1(cleaner.job(), sizes, shard, &store, &slot);
  if (HasFatalFailure()) return;

  std::vector<std::vector<uint8_t>> buffers;
  std::vector<RegisteredEntry> entries;
  buffers.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    buffers.emplace_back(sizes[i], 0xAA);
    entries.push_back({"e" + std::to_string(i), buffers.back().data(), sizes[i], {}, kHostMemory});
  }
  StagedCopierPool copiers;  // host buffers: never used
  ShardIo io(&entries, &*store, nullptr, nullptr, nullptr, &copiers);
  std::vector<uint32_t> crcs;
  Status copied = io.CopySlotToBuffers(slot, 1, &crcs);
  ASSERT_TRUE(copied.ok()) << copied.ToString();
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(buffers[i] == want[i]) << "entry " << i;
    EXPECT_EQ(crcs[i], erasure::Crc32c(want[i].data(), sizes[i])) << "entry " << i;
  }

  const_cast<uint8_t*>(store->ReadRegion(slot, 0)->data)[(8u << 20) + 12345] ^= 0x04;
  Status damaged = io.CopySlotToBuffers(slot, 1, &crcs);
  EXPECT_EQ(damaged.code(), StatusCode::kCorruption) << damaged.ToString();
  EXPECT_NE(damaged.message().find("entry 'e0' of v1"), std::string::npos) << damaged.ToString();
  EXPECT_NE(damaged.message().find("!= sealed " +
                                   std::to_string(erasure::Crc32c(want[0].data(), sizes[0]))),
            std::string::npos)
      << damaged.ToString();
}

int ThisThreadsNice() {
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  EXPECT_EQ(errno, 0);
  return nice;
}

// A survivor's own copy runs behind its node's transfers: on another thread,
// at a lower priority, at once, with fn's status; the caller's priority is
// kept, and an unjoined one is joined when it goes.
TEST(Behind, RunsFnOnAThreadOfLowerPriorityAndReturnsItsStatus) {
  const int before = ThisThreadsNice();
  int inside = -100;
  std::thread::id where;
  std::atomic<bool> go{false};
  Behind behind([&] {
    inside = ThisThreadsNice();
    where = std::this_thread::get_id();
    while (!go) std::this_thread::yield();  // runs while the creator goes on
    return Status::Corruption("the copy's own failure");
  });
  EXPECT_EQ(ThisThreadsNice(), before);
  go = true;
  Status s = behind.Join();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "the copy's own failure");
  EXPECT_EQ(inside, std::min(19, before + kBehindNice));
  EXPECT_NE(where, std::this_thread::get_id());
  EXPECT_EQ(behind.Join().code(), StatusCode::kCorruption);  // joined once, kept
  bool ran = false;
  {
    Behind unjoined([&] {
      ran = true;
      return Status::Ok();
    });
  }
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace memento::runtime
