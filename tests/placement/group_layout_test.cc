#include "memento/placement/group_layout.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace memento::placement {
namespace {

std::vector<int> Sizes(int n, const char* scheme) {
  auto layout = GroupLayout::Build(*Topology::Uniform(n), *Scheme::Parse(scheme));
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<int> sizes;
  for (const auto& g : layout->groups()) sizes.push_back(g.size());
  return sizes;
}

using V = std::vector<int>;

TEST(GroupLayoutTest, GroupSizesFollowTheRules) {
  EXPECT_EQ(Sizes(16, "replica:2"), (V{2, 2, 2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(Sizes(7, "replica:3"), (V{3, 4}));  // Gemini: last group M + N mod M, ring inside
  EXPECT_EQ(Sizes(5, "replica:2"), (V{2, 3}));
  EXPECT_EQ(Sizes(5, "replica:3"), (V{5}));  // N < 2M: one ring
  EXPECT_EQ(Sizes(16, "replica:2:ring"), (V{16}));
  EXPECT_EQ(Sizes(16, "xor:3"), (V{4, 4, 4, 4}));
  EXPECT_EQ(Sizes(10, "xor:3"), (V{4, 4, 2}));  // remainder 2 >= M+1: partial group 1+1
  EXPECT_EQ(Sizes(9, "xor:3"), (V{4, 5}));      // remainder 1 <= M: folded, 4 data + 1
  EXPECT_EQ(Sizes(17, "rs:6+2"), (V{8, 9}));
  EXPECT_EQ(Sizes(19, "rs:6+2"), (V{8, 8, 3}));
  EXPECT_EQ(Sizes(18, "rs:6+2"), (V{8, 10}));
  EXPECT_EQ(Sizes(5, "rs:6+2"), (V{5}));
  EXPECT_EQ(Sizes(3, "none"), (V{1, 1, 1}));
  EXPECT_FALSE(GroupLayout::Build(*Topology::Uniform(2), *Scheme::Parse("replica:3")).ok());
}

TEST(GroupLayoutTest, WithoutRacksGroupsAreConsecutiveRuns) {
  auto layout = GroupLayout::Build(*Topology::Uniform(10), *Scheme::Parse("xor:3"));
  ASSERT_TRUE(layout.ok());
  int next = 0;
  for (const auto& g : layout->groups()) {
    for (int m : g.members) EXPECT_EQ(m, next++);
  }
  EXPECT_EQ(layout->group(2).data, 1);
  EXPECT_EQ(layout->group(2).parity, 1);
}

TEST(GroupLayoutTest, ReplicaHolders) {
  auto ring = GroupLayout::Build(*Topology::Uniform(6), *Scheme::Parse("replica:3:ring"));
  EXPECT_EQ(ring->ReplicaHolders(5), (V{0, 1}));
  auto group = GroupLayout::Build(*Topology::Uniform(5), *Scheme::Parse("replica:2"));
  EXPECT_EQ(group->ReplicaHolders(0), (V{1}));
  EXPECT_EQ(group->ReplicaHolders(1), (V{0}));
  EXPECT_EQ(group->ReplicaHolders(4), (V{2}));  // last group {2,3,4} is a ring
}

// Every piece of every node is exactly one data row; every stripe's rows are distinct nodes;
// every node holds `parity` parity rows.
TEST(GroupLayoutTest, StripeGeometryIsAPartition) {
  for (const char* scheme : {"xor:1", "xor:3", "rs:2+2", "rs:3+2", "rs:6+2", "rs:4+4"}) {
    for (int n = 2; n <= 20; ++n) {
      auto layout = GroupLayout::Build(*Topology::Uniform(n), *Scheme::Parse(scheme));
      if (!layout.ok()) continue;
      for (int g = 0; g < static_cast<int>(layout->groups().size()); ++g) {
        const ProtectionGroup& grp = layout->group(g);
        ASSERT_EQ(grp.data + grp.parity, grp.size());
        std::set<std::pair<int, int>> pieces;  // (node, piece)
        for (int j = 0; j < grp.size(); ++j) {
          std::set<int> nodes;
          for (int t = 0; t < grp.parity; ++t) nodes.insert(layout->ParityHolder(g, j, t));
          for (int r = 0; r < grp.data; ++r) {
            const int node = layout->DataRowNode(g, j, r);
            nodes.insert(node);
            EXPECT_TRUE(pieces.insert({node, r}).second);
            EXPECT_EQ(layout->StripeOfPiece(node, r), j);
          }
          EXPECT_EQ(static_cast<int>(nodes.size()), grp.size()) << scheme << " n=" << n;
        }
        EXPECT_EQ(static_cast<int>(pieces.size()), grp.size() * grp.data);
        for (int m : grp.members) {
          auto rows = layout->ParityRowsHeldBy(m);
          EXPECT_EQ(static_cast<int>(rows.size()), grp.parity);
          for (auto [j, t] : rows) EXPECT_EQ(layout->ParityHolder(g, j, t), m);
        }
      }
    }
  }
}

TEST(GroupLayoutTest, RackAwareGroupsAvoidTwoNodesOfOneRack) {
  // 16 nodes in 4 contiguous racks of 4: consecutive pairs would share a rack.
  auto topo = Topology::UniformWithRacks(16, 1, 4);
  for (const char* scheme :
       {"replica:2", "replica:4", "xor:3", "rs:2+2", "replica:2:ring", "replica:3:ring"}) {
    auto layout = GroupLayout::Build(*topo, *Scheme::Parse(scheme));
    ASSERT_TRUE(layout.ok());
    EXPECT_EQ(layout->rack_conflicts(), 0) << scheme;
    for (const auto& g : layout->groups()) {
      if (g.kind == GroupKind::kReplica && g.size() > g.copies) {
        for (int p = 0; p < g.size(); ++p) {  // every ring window
          std::set<int> racks;
          for (int i = 0; i < g.copies; ++i)
            racks.insert(topo->rack(g.members[(p + i) % g.size()]));
          EXPECT_EQ(static_cast<int>(racks.size()), g.copies) << scheme;
        }
      } else {
        std::set<int> racks;
        for (int m : g.members) racks.insert(topo->rack(m));
        EXPECT_EQ(static_cast<int>(racks.size()), g.size()) << scheme;
      }
    }
  }
  // Unequal racks (4+3+4+3 = 14 nodes, replica:2 with 7 groups) still fit.
  auto uneven =
      GroupLayout::Build(*Topology::UniformWithRacks(14, 1, 4), *Scheme::Parse("replica:2"));
  EXPECT_EQ(uneven->rack_conflicts(), 0);
  // Two racks cannot hold groups of 3 without a repeat: reported, still a valid layout.
  auto tight =
      GroupLayout::Build(*Topology::UniformWithRacks(6, 1, 2), *Scheme::Parse("replica:3"));
  ASSERT_TRUE(tight.ok());
  EXPECT_EQ(tight->rack_conflicts(), 2);
  // ... but each group can lose two members: none may hold three nodes of one rack
  // (consecutive groups would, and lose everything with either rack). Likewise rs:4+2
  // over 3 and 4 racks: at most 2 nodes of one rack per group.
  const std::vector<std::tuple<int, int, const char*>> shapes = {
      {6, 2, "replica:3"}, {12, 3, "rs:4+2"}, {12, 4, "rs:4+2"}};
  for (const auto& [nodes, racks, scheme] : shapes) {
    SCOPED_TRACE(std::string(scheme) + " on " + std::to_string(nodes) + " nodes in " +
                 std::to_string(racks) + " racks");
    auto t = Topology::UniformWithRacks(nodes, 1, racks);
    const Scheme s = *Scheme::Parse(scheme);
    auto layout = GroupLayout::Build(*t, s);
    ASSERT_TRUE(layout.ok());
    for (const auto& g : layout->groups()) {
      std::map<int, int> per_rack;
      for (int m : g.members) EXPECT_LE(++per_rack[t->rack(m)], s.tolerance());
    }
  }
  // Racks that already alternate keep consecutive runs.
  std::vector<NodeInfo> nodes;
  for (int i = 0; i < 8; ++i) nodes.push_back({"n" + std::to_string(i), 1, i % 2});
  auto alt = GroupLayout::Build(*Topology::FromNodes(nodes), *Scheme::Parse("replica:2"));
  EXPECT_EQ(alt->group(1).members, (V{2, 3}));
}

}  // namespace
}  // namespace memento::placement
