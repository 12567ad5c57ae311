// ProtectionLayout::Build numbers the nodes from the ranks' identities: in the
// identities' natural order (vm/2 before vm/10) whatever the rank order, and a
// survivor keeps the index its store recorded.
#include "protect/protection_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transport/wire.h"

namespace memento::runtime {
namespace {

// One rank per node, `names[r]` for rank r, 1 KiB each.
std::vector<RankRecord> Records(const std::vector<std::string>& names) {
  std::vector<RankRecord> records(names.size());
  for (size_t r = 0; r < names.size(); ++r) {
    records[r].identity = names[r];
    records[r].shard_bytes = 1024;
    records[r].entries = 1;
  }
  return records;
}

TEST(ProtectionLayout, NodesAreNumberedInTheNaturalOrderOfTheirNames) {
  // Twelve virtual nodes, ranks in a shuffled order: vm/i is node i.
  const std::vector<int> order = {7, 10, 2, 0, 11, 5, 1, 9, 3, 8, 6, 4};
  std::vector<std::string> names;
  for (int i : order) names.push_back("vm/" + std::to_string(i));
  const auto records = Records(names);
  for (size_t r = 0; r < records.size(); ++r) {
    auto layout = ProtectionLayout::Build("rs:4+2", records, static_cast<int>(r), {1024});
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    EXPECT_EQ(layout->num_nodes(), 12);
    EXPECT_EQ(layout->node(), order[r]) << names[r];
    EXPECT_EQ(layout->rank_of(order[r], 0), static_cast<int>(r));
  }
}

TEST(ProtectionLayout, ASurvivorKeepsItsRecordedIndexAndNewNodesFillTheRest) {
  // vm/10 recorded index 0 in its store (an older numbering); the others are new.
  auto records = Records({"vm/2", "vm/10", "vm/1", "vm/0"});
  records[1].old_index = 0;
  records[1].old_nodes = 4;
  records[1].old_lanes = 1;
  std::vector<int> node_of(4);
  for (int r = 0; r < 4; ++r) {
    auto layout = ProtectionLayout::Build("replica:2", records, r, {1024});
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    node_of[r] = layout->node();
  }
  EXPECT_EQ(node_of, (std::vector<int>{3, 0, 2, 1}));  // vm/10; then vm/0, vm/1, vm/2
}

}  // namespace
}  // namespace memento::runtime
