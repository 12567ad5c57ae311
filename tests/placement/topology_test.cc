#include "memento/placement/topology.h"

#include <gtest/gtest.h>

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
  auto t = Topology::UniformWithRacks(10, 2, 3);  // 4 + 4 + 2
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->rack_ids(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(t->NodesInRack(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(t->NodesInRack(2), (std::vector<int>{8, 9}));
  EXPECT_EQ(t->ranks(5), 2);
}

}  // namespace
}  // namespace memento::placement
