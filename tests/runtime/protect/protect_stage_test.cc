// ProtectStage on its own, ranks as threads over the in-process transport with
// real node stores: the chunks a rank hands to the stage end up, sealed and
// bit-exact, in its replica holder's store (replica:2), or folded into the
// parity holder's region so that the parity equals the XOR of the data rows
// (xor:2); and every holder keeps the owner's entry seals.
#include "protect/protect_stage.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <thread>

#include "memento/erasure/crc32c.h"
#include "memento/runtime/inprocess_transport.h"
#include "store/store_test_util.h"
#include "transport/wire.h"

namespace memento::runtime {
namespace {

constexpr uint64_t kChunk = 1000;

uint8_t Byte(int rank, uint64_t i) { return static_cast<uint8_t>(rank * 29 + i * 13 + 1); }

struct RankResult {
  Status status;
  std::optional<ProtectionLayout> layout;
  NodeStore store;
};

using WrapTransport = std::function<std::shared_ptr<Transport>(int, std::shared_ptr<Transport>)>;

// Snapshots one entry of `bytes[r]` bytes on every rank (one node per rank)
// through an EntryCrcStage and a ProtectStage, as the engine does. `wrap`
// may put a transport of its own around a rank's.
std::vector<RankResult> ProtectOnThreads(const std::string& scheme,
                                         const std::vector<uint64_t>& bytes, const std::string& job,
                                         const WrapTransport& wrap = {}) {
  const int n = static_cast<int>(bytes.size());
  auto group = InProcessGroup::Create(n, std::chrono::seconds(20));
  std::vector<RankRecord> records(n);
  for (int r = 0; r < n; ++r) {
    records[r].identity = "node-" + std::to_string(r);
    records[r].shard_bytes = bytes[r];
    records[r].entries = 1;
  }
  std::vector<RankResult> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      RankResult& res = out[r];
      auto layout = ProtectionLayout::Build(scheme, records, r, {bytes[r]});
      if (!layout.ok()) {
        res.status = layout.status();
        return;
      }
      res.layout.emplace(std::move(layout).value());
      StoreLayout sl;
      RegionSpec spec;
      spec.name = "w";
      spec.capacity = bytes[r];
      spec.owner_node = static_cast<uint32_t>(res.layout->node());
      sl.regions.push_back(spec);
      res.layout->ExtendStoreLayout(&sl);
      auto store = NodeStore::Create({job, records[r].identity, 0}, sl, 2);
      if (!store.ok()) {
        res.status = store.status();
        return;
      }
      res.store = std::move(store).value();
      std::vector<int> chunk_entry;
      std::vector<uint64_t> chunk_length;
      for (uint64_t off = 0; off < bytes[r]; off += kChunk) {
        chunk_entry.push_back(0);
        chunk_length.push_back(std::min(kChunk, bytes[r] - off));
      }
      EntryCrcStage crcs;
      crcs.Reset(1, chunk_entry, chunk_length);
      std::shared_ptr<Transport> transport = group->transport(r);
      if (wrap) transport = wrap(r, transport);
      ProtectStage protect(&*res.layout, &res.store, transport.get(), kChunk, &crcs, {bytes[r]});
      const uint64_t version = 3;
      const int slot = 0;
      Status s = res.store.BeginWriteSlot(slot, version);
      const int chunks = static_cast<int>(chunk_entry.size());
      if (s.ok()) s = crcs.Begin(version, slot, chunks);
      if (s.ok()) s = protect.Begin(version, slot, chunks);
      uint8_t* dst = res.store.MutableRegion(slot, 0);
      for (int c = 0; s.ok() && c < chunks; ++c) {
        Chunk ch;
        ch.version = version;
        ch.slot = slot;
        ch.offset = static_cast<uint64_t>(c) * kChunk;
        ch.length = chunk_length[c];
        for (uint64_t i = 0; i < ch.length; ++i) dst[ch.offset + i] = Byte(r, ch.offset + i);
        ch.data = dst + ch.offset;
        ch.crc = erasure::Crc32c(ch.data, ch.length);
        ch.index = c;
        s = crcs.OnChunk(ch);
        if (s.ok()) s = protect.OnChunk(ch);
      }
      Status e = crcs.End(version, s);
      if (s.ok()) s = e;
      e = protect.End(version, s);
      if (s.ok()) s = e;
      // Sealed as the Committer seals: the entry, then the slot.
      if (s.ok()) s = res.store.SealRegion(slot, 0, bytes[r], crcs.entry_crc(0));
      if (s.ok()) s = res.store.SealSlot(slot, version);
      res.status = s;
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(ProtectStage, ReplicaHolderGetsTheOwnersChunksSealed) {
  testing::JobCleaner cleaner(testing::UniqueJob("protect-replica"));
  const std::vector<uint64_t> bytes = {4500, 2100};  // odd sizes, last chunk short
  auto out = ProtectOnThreads("replica:2", bytes, cleaner.job());
  for (const RankResult& r : out) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  for (int holder = 0; holder < 2; ++holder) {
    const RankResult& h = out[holder];
    const int owner = 1 - holder;
    const int region = h.layout->ReplicaRegion(out[owner].layout->node());
    ASSERT_GE(region, 0);
    ASSERT_TRUE(h.store.VerifyRegion(0, region).ok());
    auto view = h.store.ReadRegion(0, region);
    ASSERT_TRUE(view.ok());
    ASSERT_EQ(view->length, bytes[owner]);
    for (uint64_t i = 0; i < bytes[owner]; ++i) {
      ASSERT_EQ(view->data[i], Byte(owner, i)) << "byte " << i;
    }
    // The owner's entry seals are kept too.
    const int seals = h.layout->SealsRegionOf(out[owner].layout->node());
    ASSERT_GE(seals, 0);
    EXPECT_TRUE(h.store.VerifyRegion(0, seals).ok());
  }
}

TEST(ProtectStage, ParityIsTheXorOfTheStripesDataRows) {
  testing::JobCleaner cleaner(testing::UniqueJob("protect-xor"));
  const std::vector<uint64_t> bytes = {3000, 3000, 3000};
  auto out = ProtectOnThreads("xor:2", bytes, cleaner.job());
  for (const RankResult& r : out) ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  // Every parity region held anywhere verifies against its seal. Each stripe
  // is one P-byte row of every node (a shard is cut into P-byte data rows, a
  // holder keeps one parity row), and a stripe's rows XOR to zero: so the
  // XOR of every P-byte row, data and parity, over all nodes is zero, byte
  // for byte. A parity row that is a copy of one data row, or folded at the
  // wrong offset, leaves it nonzero.
  int parity_regions = 0;
  std::vector<uint8_t> fold;
  for (const RankResult& r : out) {
    for (const HeldRegion& h : r.layout->held()) {
      if (h.item.kind != placement::ItemKind::kParity) continue;
      ++parity_regions;
      EXPECT_TRUE(r.store.VerifyRegion(0, h.region).ok());
      auto view = r.store.ReadRegion(0, h.region);
      ASSERT_TRUE(view.ok());
      if (fold.empty()) fold.assign(view->length, 0);
      ASSERT_EQ(view->length, fold.size()) << "parity rows of unequal length";
      for (uint64_t i = 0; i < view->length; ++i) fold[i] ^= view->data[i];
    }
  }
  ASSERT_EQ(parity_regions, 3);   // one parity row per node (rotating)
  ASSERT_EQ(fold.size(), 1500u);  // 3000-byte shards in two data rows each
  for (int r = 0; r < 3; ++r) {
    for (uint64_t i = 0; i < bytes[r]; ++i) fold[i % fold.size()] ^= Byte(r, i);
  }
  for (size_t i = 0; i < fold.size(); ++i) {
    ASSERT_EQ(fold[i], 0) << "byte " << i << " of the stripes' rows does not XOR to zero";
  }
}

// The second replica header goes out with `offset` in place of its own, if
// one is given; the protect payloads rank 0 sends and those rank 1 receives
// are counted (rank 0 wraps its transport with an offset, rank 1 without).
class BadOffsetTransport : public ForwardingTransport {
 public:
  struct Counts {
    std::atomic<int> sent{0}, received{0};
  };
  BadOffsetTransport(std::shared_ptr<Transport> inner, std::optional<uint64_t> offset,
                     Counts* counts)
      : ForwardingTransport(std::move(inner)), offset_(offset), counts_(counts) {}
  Status Send(int peer, int tag, const void* data, size_t bytes) override {
    wire::ProtectHeader h;
    if (tag == wire::kTagProtect && bytes == sizeof(h)) {
      std::memcpy(&h, data, sizeof(h));
      if (offset_ && h.kind == wire::kReplicaPart && ++replica_headers_ == 2) {
        h.offset = *offset_;
        return ForwardingTransport::Send(peer, tag, &h, sizeof(h));
      }
    }
    if (tag == wire::kTagProtectPayload && rank() == 0) ++counts_->sent;
    return ForwardingTransport::Send(peer, tag, data, bytes);
  }
  Result<size_t> Recv(int peer, int tag, void* data, size_t capacity) override {
    Result<size_t> r = ForwardingTransport::Recv(peer, tag, data, capacity);
    if (tag == wire::kTagProtectPayload && r.ok() && rank() == 1) ++counts_->received;
    return r;
  }

 private:
  const std::optional<uint64_t> offset_;
  Counts* const counts_;
  int replica_headers_ = 0;
};

// A replica part whose offset lies beyond the holder's region of its owner
// (past it, and so far that offset + length wraps around 2^64) is refused by
// name and fails the version on the holder, which still receives every
// payload the owner sent, up to its entry seals: under MPI the owner's sends
// would otherwise wait for the timeout, and the next version's receives
// would meet them.
TEST(ProtectStage, APartBeyondItsRegionIsRefusedAndTheRestOfTheVersionIsReceived) {
  const std::vector<uint64_t> bytes = {4500, 2100};
  for (uint64_t offset : {uint64_t{4000}, std::numeric_limits<uint64_t>::max() - 10}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    testing::JobCleaner cleaner(testing::UniqueJob("protect-bad-offset"));
    BadOffsetTransport::Counts counts;
    auto out = ProtectOnThreads(
        "replica:2", bytes, cleaner.job(), [&](int r, std::shared_ptr<Transport> t) {
          return std::make_shared<BadOffsetTransport>(
              std::move(t), r == 0 ? std::optional<uint64_t>(offset) : std::nullopt, &counts);
        });
    EXPECT_TRUE(out[0].status.ok()) << out[0].status.ToString();
    ASSERT_FALSE(out[1].status.ok());
    EXPECT_EQ(out[1].status.code(), StatusCode::kCorruption) << out[1].status.ToString();
    EXPECT_NE(out[1].status.message().find("from rank 0 beyond its region of 4500 bytes"),
              std::string::npos)
        << out[1].status.ToString();
    // Five replica payloads and the seals, every one received.
    EXPECT_EQ(counts.sent.load(), 6);
    EXPECT_EQ(counts.received.load(), counts.sent.load());
  }
}

// A replica part sent twice in place of the next one: the holder receives
// every byte the owner's region has, yet part of the region holds what the
// slot held before. The version fails there instead of being sealed.
TEST(ProtectStage, ReplicaPartsThatOverlapFailTheVersionInsteadOfSealingStaleBytes) {
  testing::JobCleaner cleaner(testing::UniqueJob("protect-overlap"));
  BadOffsetTransport::Counts counts;
  auto out = ProtectOnThreads(
      "replica:2", {4500, 2100}, cleaner.job(), [&](int r, std::shared_ptr<Transport> t) {
        return std::make_shared<BadOffsetTransport>(
            std::move(t), r == 0 ? std::optional<uint64_t>(0) : std::nullopt, &counts);
      });
  EXPECT_TRUE(out[0].status.ok()) << out[0].status.ToString();
  ASSERT_FALSE(out[1].status.ok()) << "rank 1 sealed a replica with a hole in it";
  EXPECT_EQ(out[1].status.code(), StatusCode::kCorruption) << out[1].status.ToString();
  EXPECT_NE(out[1].status.message().find("overlap at byte"), std::string::npos)
      << out[1].status.ToString();
}

}  // namespace
}  // namespace memento::runtime
