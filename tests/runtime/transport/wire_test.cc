// Every record of transport/wire.h survives encode -> decode, and every
// decoder refuses a record of the wrong size with Corruption.
#include "transport/wire.h"

#include <gtest/gtest.h>

#include <cstring>

namespace memento::runtime::wire {
namespace {

// Fields per inventory item on the wire (see wire.h).
constexpr size_t kInventoryFieldsForTest = 8;

TEST(Wire, RecoverTagStaysInsideItsRange) {
  EXPECT_EQ(RecoverTag(0), kTagRecoverBase);
  EXPECT_EQ(RecoverTag(5), kTagRecoverBase + 5);
  EXPECT_EQ(RecoverTag(kRecoverTagSpan), kTagRecoverBase);
  for (size_t i : {size_t{0}, size_t{13999}, size_t{14000}, size_t{1} << 40}) {
    EXPECT_GE(RecoverTag(i), kTagRecoverBase);
    EXPECT_LT(RecoverTag(i), kTagRecoverBase + kRecoverTagSpan);
  }
  // The ranges of the stages are disjoint.
  EXPECT_LT(kTagPersistDone, kTagProtectPayload);
  EXPECT_LT(kTagProtectPayload, kTagProtect);
  EXPECT_LT(kTagProtect, kTagRecoverBase);
}

TEST(Wire, PersistRecordRoundTrips) {
  PersistRecord r;
  r.version = 1ull << 40;
  r.ok = true;
  r.file.file = "rank-00003.bin";
  r.file.bytes = 123456789012ull;
  r.file.crc = 0xDEADBEEF;
  auto bytes = EncodePersistRecord(r);
  EXPECT_EQ(bytes.size(), 25 + r.file.file.size());
  auto back = DecodePersistRecord(bytes.data(), bytes.size());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->version, r.version);
  EXPECT_TRUE(back->ok);
  EXPECT_EQ(back->file.file, r.file.file);
  EXPECT_EQ(back->file.bytes, r.file.bytes);
  EXPECT_EQ(back->file.crc, r.file.crc);

  r.ok = false;
  r.file.file.clear();
  bytes = EncodePersistRecord(r);
  back = DecodePersistRecord(bytes.data(), bytes.size());
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->ok);
  EXPECT_FALSE(back->writing);
  EXPECT_TRUE(back->file.file.empty());

  // A "still writing" heartbeat; a state byte past 2 is refused.
  r.writing = true;
  bytes = EncodePersistRecord(r);
  back = DecodePersistRecord(bytes.data(), bytes.size());
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->writing);
  EXPECT_FALSE(back->ok);
  bytes[8] = 3;
  EXPECT_EQ(DecodePersistRecord(bytes.data(), bytes.size()).status().code(),
            StatusCode::kCorruption);
}

TEST(Wire, PersistRecordOfWrongLengthIsCorruption) {
  PersistRecord r;
  r.file.file = "f";
  auto bytes = EncodePersistRecord(r);
  EXPECT_EQ(DecodePersistRecord(bytes.data(), 10).status().code(), StatusCode::kCorruption);
  bytes.push_back(0);
  auto bad = DecodePersistRecord(bytes.data(), bytes.size());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_NE(bad.status().message().find("name length"), std::string::npos);
}

TEST(Wire, RankRecordRoundTrips) {
  RankRecord r;
  r.identity = "node-a:lane";
  r.lane = 3;
  r.old_index = -1;
  r.old_nodes = 8;
  r.shard_bytes = 5ull << 33;
  r.entries = 17;
  r.old_lanes = 4;
  auto back = DecodeRankRecord(EncodeRankRecord(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->identity, r.identity);
  EXPECT_EQ(back->lane, 3);
  EXPECT_EQ(back->old_index, -1);
  EXPECT_EQ(back->old_nodes, 8u);
  EXPECT_EQ(back->shard_bytes, r.shard_bytes);
  EXPECT_EQ(back->entries, 17u);
  EXPECT_EQ(back->old_lanes, 4u);
  EXPECT_EQ(DecodeRankRecord(std::vector<uint8_t>(24)).status().code(), StatusCode::kCorruption);
}

placement::InventoryItem Item(uint64_t version, placement::ItemKind kind, int owner, int stripe,
                              int row, uint64_t bytes, bool ok) {
  placement::InventoryItem it;
  it.version = version;
  it.kind = kind;
  it.owner = owner;
  it.stripe = stripe;
  it.row = row;
  it.bytes = bytes;
  it.crc_ok = ok;
  return it;
}

TEST(Wire, InventoryRoundTripsWithTheSendersNodeAndLane) {
  Inventory inv;
  inv.remote_complete = {37, 41};
  inv.remote_lineage = {7, 0xF000000000000001ull};
  inv.items.push_back(Item(42, placement::ItemKind::kShard, 2, -1, -1, 1000, true));
  inv.items.push_back(Item(42, placement::ItemKind::kParity, -1, 3, 1, 256, false));
  inv.items.push_back(Item(40, placement::ItemKind::kReplica, 5, -1, -1, 1000, true));
  inv.item_lineage = {9};
  inv.item_committed = {false, true};  // the third one missing: not committed
  auto back = DecodeInventory(EncodeInventory(inv), /*node=*/2, /*lane=*/1);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->remote_complete, (std::vector<uint64_t>{37, 41}));
  EXPECT_EQ(back->remote_lineage, inv.remote_lineage);
  EXPECT_EQ(back->item_lineage, (std::vector<uint64_t>{9, 0, 0}));  // missing ones are 0
  EXPECT_EQ(back->item_committed, (std::vector<bool>{false, true, false}));
  // The committed mark does not disturb crc_ok (one flags word carries both).
  EXPECT_FALSE(HoldsCommitted(*back, 9));  // item 0 (lineage 9) is not committed
  EXPECT_TRUE(HoldsCommitted(*back, 0));   // item 1 (lineage 0) is
  EXPECT_TRUE(HoldsCommitted(*back, 7));   // a complete remote version of lineage 7
  ASSERT_EQ(back->items.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto& a = inv.items[i];
    const auto& b = back->items[i];
    EXPECT_EQ(b.node, 2);
    EXPECT_EQ(b.lane, 1);
    EXPECT_EQ(b.version, a.version);
    EXPECT_EQ(b.kind, a.kind);
    EXPECT_EQ(b.owner, a.owner);
    EXPECT_EQ(b.stripe, a.stripe);
    EXPECT_EQ(b.row, a.row);
    EXPECT_EQ(b.bytes, a.bytes);
    EXPECT_TRUE(b.sealed);
    EXPECT_EQ(b.crc_ok, a.crc_ok);
  }
  Inventory empty;
  auto none = DecodeInventory(EncodeInventory(empty), 0, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->remote_complete.empty());
  EXPECT_TRUE(none->items.empty());
}

TEST(Wire, InventoryOfWrongSizeIsCorruption) {
  Inventory inv;
  inv.items.push_back(Item(1, placement::ItemKind::kShard, 0, -1, -1, 8, true));
  auto bytes = EncodeInventory(inv);
  bytes.resize(bytes.size() - 8);
  EXPECT_EQ(DecodeInventory(bytes, 0, 0).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeInventory({}, 0, 0).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeInventory(std::vector<uint8_t>(13), 0, 0).status().code(),
            StatusCode::kCorruption);
  // A remote-version count that runs past the end, or is negative.
  for (int64_t count : {int64_t{5}, int64_t{-1}}) {
    std::vector<uint8_t> lying(8 * (1 + kInventoryFieldsForTest));
    std::memcpy(lying.data(), &count, 8);
    EXPECT_EQ(DecodeInventory(lying, 0, 0).status().code(), StatusCode::kCorruption) << count;
  }
}

TEST(Wire, SealsRecordsRoundTripAndRefuseOverruns) {
  std::vector<uint8_t> blob;
  AppendSealsRecord({1, 0, {1, 2, 3}}, &blob);
  AppendSealsRecord({2, 1, {}}, &blob);
  AppendSealsRecord({3, 0, std::vector<uint8_t>(100, 9)}, &blob);
  auto back = DecodeSealsRecords(blob);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0].node, 1);
  EXPECT_EQ((*back)[0].seals, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ((*back)[1].lane, 1);
  EXPECT_TRUE((*back)[1].seals.empty());
  EXPECT_EQ((*back)[2].seals.size(), 100u);

  std::vector<uint8_t> cut(blob.begin(), blob.end() - 1);
  EXPECT_EQ(DecodeSealsRecords(cut).status().code(), StatusCode::kCorruption);
  std::vector<uint8_t> short_header(blob.begin(), blob.begin() + 20);
  EXPECT_EQ(DecodeSealsRecords(short_header).status().code(), StatusCode::kCorruption);
}

TEST(Wire, CountersRoundTripAndCheckTheirCount) {
  auto bytes = EncodeCounters({1, 1ull << 63, 0});
  auto back = DecodeCounters(bytes, 3);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, (std::vector<uint64_t>{1, 1ull << 63, 0}));
  EXPECT_EQ(DecodeCounters(bytes, 2).status().code(), StatusCode::kCorruption);
}

TEST(Wire, FixedHeadersAreSentAsTheirBytes) {
  ProtectHeader h;
  h.version = 9;
  h.kind = kParityPart;
  h.attempt = 2;
  uint8_t raw[sizeof(ProtectHeader)];
  std::memcpy(raw, &h, sizeof(h));
  ProtectHeader back;
  std::memcpy(&back, raw, sizeof(back));
  EXPECT_EQ(back.version, 9u);
  EXPECT_EQ(back.kind, kParityPart);
  EXPECT_EQ(back.attempt, 2u);
  EXPECT_NE(kReplicaPart, kParityPart);
  EXPECT_NE(kParityPart, kSealsPart);
}

placement::RankCatalog SomeRank(int node, int lane) {
  placement::RankCatalog r;
  r.node = node;
  r.lane = lane;
  r.entries.push_back({"w", 96, {"bfloat16", {8, 12}, {4, 12}, {4, 0}}});
  r.entries.push_back({"opaque", 5, {}});
  return r;
}

TEST(Wire, CatalogsRoundTripAndRefuseDamage) {
  JobCatalog c;
  c.scheme = "rs:4+2";
  c.nodes = 2;
  c.lanes = 1;
  c.shard_bytes = {101, 202};
  c.entry_count = {2, 2};
  c.ranks = {SomeRank(0, 0), SomeRank(1, 0)};
  const std::vector<uint8_t> bytes = EncodeJobCatalog(c);
  auto back = DecodeJobCatalog(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->scheme, "rs:4+2");
  EXPECT_EQ(back->shard_bytes, c.shard_bytes);
  EXPECT_EQ(back->entry_count, c.entry_count);
  ASSERT_EQ(back->ranks.size(), 2u);
  EXPECT_EQ(back->ranks[1].node, 1);
  EXPECT_EQ(back->ranks[1].entries[0].slice, c.ranks[1].entries[0].slice);
  EXPECT_EQ(back->ranks[1].entries[1].bytes, 5u);
  // Every truncation and a trailing byte are refused, never read past.
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(DecodeJobCatalog(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n))
                  .status().code(),
              StatusCode::kCorruption)
        << n;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(DecodeJobCatalog(longer).ok());
  auto rank = DecodeRankCatalog(EncodeRankCatalog(SomeRank(3, 1)));
  ASSERT_TRUE(rank.ok());
  EXPECT_EQ(rank->lane, 1);
  EXPECT_EQ(rank->entries[0].name, "w");
}

// A damaged count is refused against the bytes that are left before anything
// is sized by it (a count up to the record's length used to be taken, and
// sized a vector of ~150 bytes an entry before the read ran out).
TEST(Wire, CountsThatCannotFitTheRecordAreRefusedBeforeTheyAreSized) {
  std::vector<uint8_t> rank = EncodeRankCatalog(SomeRank(3, 1));
  // node, lane, then the entry count: claim as many entries as bytes follow.
  const uint32_t claimed = static_cast<uint32_t>(rank.size() - 12);
  std::memcpy(rank.data() + 8, &claimed, 4);
  Status s = DecodeRankCatalog(rank).status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find(std::to_string(claimed) + " entries cannot fit"), std::string::npos)
      << s.ToString();

  JobCatalog c;
  c.scheme = "xor:3";
  c.nodes = 1;
  c.lanes = 1;
  c.shard_bytes = {10};
  c.entry_count = {0};
  std::vector<uint8_t> job = EncodeJobCatalog(c);
  // magic, scheme ("xor:3": 4 + 5 bytes), then nodes: 4096 nodes of 12 bytes
  // each cannot follow in what is left.
  const int32_t nodes = 4096;
  std::memcpy(job.data() + 4 + 9, &nodes, 4);
  s = DecodeJobCatalog(job).status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("4096 places cannot fit"), std::string::npos) << s.ToString();

  ElasticInventory inv;
  std::vector<uint8_t> elastic = EncodeElasticInventory(inv);
  // The store count follows the remote inventory's blob (8 + 8 bytes).
  const uint32_t stores = 1000;
  elastic.resize(elastic.size() + 64, 0);
  std::memcpy(elastic.data() + 16, &stores, 4);
  s = DecodeElasticInventory(elastic).status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("1000 stores cannot fit"), std::string::npos) << s.ToString();
}

TEST(Wire, ElasticInventoryAndLocatedBadItemsRoundTrip) {
  ElasticInventory inv;
  inv.remote.remote_complete = {9};
  inv.remote.remote_lineage = {77};
  ElasticStoreRecord s;
  s.node = 5;
  s.lane = 1;
  s.name = "/memento.j.n_5-ab.r1.elastic.42";
  s.catalog = {1, 2, 3};
  s.items.items = {Item(4, placement::ItemKind::kReplica, 6, -1, -1, 1000, true)};
  s.items.item_lineage = {77};
  inv.stores.push_back(s);
  const std::vector<uint8_t> bytes = EncodeElasticInventory(inv);
  auto back = DecodeElasticInventory(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->remote.remote_complete, inv.remote.remote_complete);
  ASSERT_EQ(back->stores.size(), 1u);
  EXPECT_EQ(back->stores[0].name, s.name);
  EXPECT_EQ(back->stores[0].catalog, s.catalog);
  ASSERT_EQ(back->stores[0].items.items.size(), 1u);
  EXPECT_EQ(back->stores[0].items.items[0].node, 5);  // the store's, not the sender's
  EXPECT_EQ(back->stores[0].items.items[0].lane, 1);
  EXPECT_EQ(back->stores[0].items.item_lineage[0], 77u);
  EXPECT_FALSE(DecodeElasticInventory(std::vector<uint8_t>(bytes.begin(), bytes.end() - 1)).ok());

  placement::InventoryItem bad = Item(4, placement::ItemKind::kParity, 1, 2, 3, 0, false);
  bad.node = 6;
  bad.lane = 2;
  auto items = DecodeLocatedBadItems(EncodeLocatedBadItems({bad}));
  ASSERT_TRUE(items.ok());
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].node, 6);
  EXPECT_EQ((*items)[0].lane, 2);
  EXPECT_EQ((*items)[0].stripe, 2);
  EXPECT_EQ((*items)[0].row, 3);
  EXPECT_FALSE(DecodeLocatedBadItems(std::vector<uint8_t>(7)).ok());
}

}  // namespace
}  // namespace memento::runtime::wire
