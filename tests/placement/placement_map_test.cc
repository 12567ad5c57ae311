#include "memento/placement/placement_map.h"

#include <gtest/gtest.h>

namespace memento::placement {
namespace {

GroupLayout Layout(int n, const char* scheme) {
  return *GroupLayout::Build(*Topology::Uniform(n), *Scheme::Parse(scheme));
}

TEST(PlacementMapTest, MemoryPerNodeFollowsDesignFormulas) {
  const uint64_t s = 720720;  // divisible by 1..16
  for (const char* scheme : {"replica:2", "replica:3", "replica:2:ring", "replica:4:ring"}) {
    for (int n : {4, 5, 7, 12, 16}) {
      auto layout = GroupLayout::Build(*Topology::Uniform(n), *Scheme::Parse(scheme));
      if (!layout.ok()) continue;
      const PlacementMap map = PlacementMap::Uniform(*layout, s);
      for (int node = 0; node < n; ++node) {
        EXPECT_EQ(map.bytes_at(node), layout->scheme().copies() * s) << scheme << " n=" << n;
      }
    }
  }
  for (const char* scheme : {"xor:3", "rs:6+2", "rs:4+4", "xor:1"}) {
    const Scheme sch = *Scheme::Parse(scheme);
    const int g = sch.data() + sch.parity();
    const PlacementMap map = PlacementMap::Uniform(Layout(4 * g, scheme), s);
    for (int node = 0; node < 4 * g; ++node) {
      EXPECT_EQ(map.bytes_at(node), s + sch.parity() * s / sch.data()) << scheme;
      EXPECT_DOUBLE_EQ(static_cast<double>(map.bytes_at(node)) / s, sch.NominalMemoryFactor());
    }
  }
  const PlacementMap none = PlacementMap::Uniform(Layout(5, "none"), s);
  EXPECT_EQ(none.bytes_at(3), s);
  EXPECT_EQ(none.held_by(3).size(), 1u);
}

TEST(PlacementMapTest, PartialAndFoldedGroups) {
  const uint64_t s = 1000;
  // xor:3 on 10 nodes: last group {8,9} is 1 data + 1 parity: 2S per node.
  const PlacementMap partial = PlacementMap::Uniform(Layout(10, "xor:3"), s);
  EXPECT_EQ(partial.bytes_at(9), 2 * s);
  EXPECT_EQ(partial.bytes_at(0), s + 334);  // ceil(1000/3)
  // rs:6+2 on 17 nodes: last group of 9 = 7 data + 2 parity.
  const PlacementMap folded = PlacementMap::Uniform(Layout(17, "rs:6+2"), s);
  EXPECT_EQ(folded.bytes_at(16), s + 2 * 143);  // ceil(1000/7) = 143
  EXPECT_EQ(folded.piece_bytes(1), 143u);
}

TEST(PlacementMapTest, UnequalShardsSizeParityFromTheGroupMax) {
  auto map = PlacementMap::Build(Layout(4, "rs:2+2"), {100, 400, 50, 0});
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map->piece_bytes(0), 200u);
  EXPECT_EQ(map->bytes_at(2), 50u + 2 * 200);
  EXPECT_EQ(map->DataPieceBytes(0, 0), 100u);
  EXPECT_EQ(map->DataPieceBytes(0, 1), 0u);
  EXPECT_EQ(map->DataPieceBytes(1, 1), 200u);
  auto rep = PlacementMap::Build(Layout(4, "replica:2"), {100, 400, 50, 0});
  EXPECT_EQ(rep->bytes_at(0), 500u);
  EXPECT_EQ(rep->bytes_at(3), 50u);
  EXPECT_EQ(rep->max_bytes_per_node(), 500u);
  EXPECT_FALSE(PlacementMap::Build(Layout(4, "replica:2"), {1, 2}).ok());
}

TEST(PlacementMapTest, HeldItemsMatchTheLayout) {
  const GroupLayout layout = Layout(6, "replica:3:ring");
  const PlacementMap map = PlacementMap::Uniform(layout, 10);
  ASSERT_EQ(map.held_by(0).size(), 3u);
  EXPECT_EQ(map.held_by(0)[0].kind, ItemKind::kShard);
  EXPECT_EQ(map.held_by(0)[1].owner, 4);  // node 0 holds copies of 4 and 5
  EXPECT_EQ(map.held_by(0)[2].owner, 5);
}

}  // namespace
}  // namespace memento::placement
