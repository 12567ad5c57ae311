#include "memento/placement/topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace memento::placement {
namespace {

TEST(TopologyTest, SortsByIdentity) {
  auto t = Topology::FromNodes({{"hostc", 2}, {"hosta", 2}, {"hostb", 2}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->node(0).identity, "hosta");
  EXPECT_EQ(t->node(2).identity, "hostc");
  EXPECT_EQ(t->IndexOf("hostb"), 1);
  EXPECT_EQ(t->IndexOf("hostz"), std::nullopt);
  EXPECT_TRUE(t->uniform_ranks());
  EXPECT_FALSE(t->has_racks());
}

TEST(TopologyTest, NumbersInIdentitiesSortByValue) {
  // As a host list reads: vm/2 before vm/10, gpu-9 before gpu-10, the rack number first.
  auto t = Topology::FromNodes({{"vm/10", 1}, {"vm/2", 1}, {"vm/1", 1}, {"vm/0", 1}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->node(0).identity, "vm/0");
  EXPECT_EQ(t->node(2).identity, "vm/2");
  EXPECT_EQ(t->node(3).identity, "vm/10");
  EXPECT_EQ(t->IndexOf("vm/10"), 3);
  EXPECT_EQ(t->IndexOf("vm/3"), std::nullopt);
  EXPECT_TRUE(NodeOrderLess("gpu-9", "gpu-10"));
  EXPECT_TRUE(NodeOrderLess("r2-n30", "r10-n1"));
  EXPECT_FALSE(NodeOrderLess("gpu-10", "gpu-9"));
  EXPECT_TRUE(NodeOrderLess("gpu", "gpu-1"));                          // a prefix first
  EXPECT_TRUE(NodeOrderLess("a-", "a0")) << "'-' < '0' in bytes";      // digit vs other byte
  EXPECT_TRUE(NodeOrderLess("a9", "a:")) << "'9' < ':' in bytes";
  EXPECT_TRUE(NodeOrderLess("node99999999999999999999", "node100000000000000000000"));
  // Equal by value, distinct names: both kept, in byte order.
  EXPECT_TRUE(NodeOrderLess("n01", "n1"));
  EXPECT_FALSE(NodeOrderLess("n1", "n01"));
  EXPECT_FALSE(NodeOrderLess("n1", "n1"));
  auto padded = Topology::FromNodes({{"n1", 1}, {"n01", 1}, {"n001", 1}});
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(padded->IndexOf("n1"), 2);
  EXPECT_EQ(padded->IndexOf("n001"), 0);
  // A strict total order on a mixed set: sorted once, every pair agrees with the positions.
  std::vector<std::string> names = {"a", "a0", "a00", "a1", "a01", "a10", "a9", "a-1", "a:",
                                    "b", "10", "9", "09", "", "x1y2", "x1y10", "x01y3", "x1",
                                    "host.rack3.n7", "host.rack3.n12", "host.rack12.n1"};
  std::mt19937 rng(7);
  std::shuffle(names.begin(), names.end(), rng);
  std::sort(names.begin(), names.end(), NodeOrder());
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = 0; j < names.size(); ++j) {
      EXPECT_EQ(NodeOrderLess(names[i], names[j]), i < j) << names[i] << " vs " << names[j];
    }
  }
}

TEST(TopologyTest, RejectsBadNodes) {
  EXPECT_EQ(Topology::FromNodes({}).status().code(), StatusCode::kInvalidArgument);
  auto dup = Topology::FromNodes({{"a", 1}, {"a", 1}});
  EXPECT_NE(dup.status().message().find("duplicate node identity 'a'"), std::string::npos);
  EXPECT_FALSE(Topology::FromNodes({{"", 1}}).ok());
  EXPECT_FALSE(Topology::FromNodes({{"a", 0}}).ok());
  EXPECT_FALSE(Topology::FromNodes({{"a", 1, 0}, {"b", 1, kNoRack}}).ok());
  EXPECT_FALSE(Topology::UniformWithRacks(4, 1, 5).ok());
}

TEST(TopologyTest, UniformWithRacksMakesContiguousRacks) {
  auto t = Topology::UniformWithRacks(10, 2, 3);  // 4 + 3 + 3
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->rack_ids(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(t->NodesInRack(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(t->NodesInRack(2), (std::vector<int>{7, 8, 9}));
  EXPECT_EQ(t->ranks(5), 2);
  // As many racks as asked for, whatever N / R is, each of N / R nodes, give or take one.
  for (auto [n, r] : {std::pair{10, 6}, {5, 4}, {7, 5}, {16, 4}, {9, 9}, {1000, 7}}) {
    auto u = Topology::UniformWithRacks(n, 1, r);
    ASSERT_TRUE(u.ok()) << n << " nodes, " << r << " racks";
    ASSERT_EQ(static_cast<int>(u->rack_ids().size()), r) << n << " nodes, " << r << " racks";
    for (int id : u->rack_ids()) {
      const int size = static_cast<int>(u->NodesInRack(id).size());
      EXPECT_TRUE(size == n / r || size == (n + r - 1) / r) << n << "/" << r << " rack " << id;
    }
  }
  // Past 10^5 nodes the names widen, so racks stay contiguous in index order.
  auto big = Topology::UniformWithRacks(200000, 1, 2);
  ASSERT_TRUE(big.ok());
  const std::vector<int> rack0 = big->NodesInRack(0);
  ASSERT_EQ(rack0.size(), 100000u);
  EXPECT_EQ(rack0.front(), 0);
  EXPECT_EQ(rack0.back(), 99999);
  EXPECT_EQ(big->IndexOf("node100000"), 100000);
}

}  // namespace
}  // namespace memento::placement
