// The truncated per-group probabilities against the O(N^2) exact forms of
// recovery_probability.h, and their reach to 100,000 nodes.
#include <gtest/gtest.h>

#include <cmath>

#include "memento/placement/recovery_probability.h"
#include "memento/placement/serve_probability.h"

namespace memento::placement {
namespace {

TEST(GoodputServeProbabilityTest, SameAsTheExactFormsForSmallJobs) {
  for (const char* text : {"none", "replica:2", "replica:3", "replica:2:ring", "replica:3:ring",
                           "xor:3", "xor:7", "rs:4+2", "rs:6+3"}) {
    auto scheme = Scheme::Parse(text);
    ASSERT_TRUE(scheme.ok());
    for (int nodes : {5, 16, 30, 67, 128}) {
      if (!scheme->ValidateFor(nodes).ok()) continue;
      for (int per_rack : {0, 4}) {
        FailureProcess f;
        if (per_rack > 0) {
          f.rack_mtbf_s = 1;
          f.nodes_per_rack = per_rack;
        }
        auto topo = TopologyFor(nodes, f);
        ASSERT_TRUE(topo.ok());
        auto layout = GroupLayout::Build(*topo, *scheme);
        ASSERT_TRUE(layout.ok());
        auto exact_all = ExactRecoveryProbabilities(*layout, std::min(nodes, 8));
        ASSERT_TRUE(exact_all.ok()) << exact_all.status().ToString();
        const std::vector<double>& exact = exact_all->recover;
        for (int failures = 0; failures <= std::min(nodes, 8); ++failures) {
          auto fast = FewFailuresRecoveryProbability(*layout, failures);
          ASSERT_TRUE(fast.ok());
          EXPECT_NEAR(*fast, exact[failures], 1e-12)
              << text << " N=" << nodes << " f=" << failures << " racks of " << per_rack;
        }
        if (per_rack > 0) {
          auto rack = OneRackLossProbability(*layout, *topo);
          auto rack_exact = ExactRackLossProbability(*layout, *topo, 1);
          ASSERT_TRUE(rack.ok() && rack_exact.ok());
          EXPECT_DOUBLE_EQ(*rack, *rack_exact) << text << " N=" << nodes;
        }
      }
    }
  }
}

TEST(GoodputServeProbabilityTest, KnownValues) {
  // Gemini's setting: 16 nodes in mirrored pairs, two failures: 1 - 8 / C(16, 2).
  auto layout = GroupLayout::Build(*Topology::Uniform(16), Scheme::Replica(2));
  ASSERT_TRUE(layout.ok());
  EXPECT_NEAR(*FewFailuresRecoveryProbability(*layout, 2), 14.0 / 15.0, 1e-15);
  // 100,000 nodes, xor:4 (20,000 groups of 5): two failures are fatal only within a group.
  auto big = GroupLayout::Build(*Topology::Uniform(100000), Scheme::Xor(4));
  ASSERT_TRUE(big.ok());
  const double fatal = 20000.0 * 10 / (100000.0 * 99999 / 2);
  EXPECT_NEAR(*FewFailuresRecoveryProbability(*big, 2), 1 - fatal, 1e-13);
  EXPECT_NEAR(*FewFailuresRecoveryProbability(*big, 1), 1.0, 1e-12);
  // One ring over 100,000 nodes, 2 copies: two failures are fatal when adjacent.
  auto ring =
      GroupLayout::Build(*Topology::Uniform(100000), Scheme::Replica(2, ReplicaPlacement::kRing));
  ASSERT_TRUE(ring.ok());
  EXPECT_NEAR(*FewFailuresRecoveryProbability(*ring, 2), 1 - 100000.0 / (100000.0 * 99999 / 2),
              1e-13);
  EXPECT_FALSE(FewFailuresRecoveryProbability(*layout, 17).ok());
  EXPECT_FALSE(FewFailuresRecoveryProbability(*layout, -1).ok());
}

TEST(GoodputServeProbabilityTest, RackAwareLayoutsSurviveARack) {
  FailureProcess f;
  f.rack_mtbf_s = 1000;
  f.nodes_per_rack = 16;
  f.node_mtbf_s = 1000;
  f.multi_events_per_day = 1;
  f.multi_event_nodes = 3;
  auto p = ComputeServeProbabilities(Scheme::ReedSolomon(8, 2), 4096, f);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_NEAR(p->node, 1.0, 1e-12);
  EXPECT_NEAR(p->rack, 1.0, 1e-12);  // groups take one node per rack
  EXPECT_GT(p->multi, 0.99);
  EXPECT_LT(p->multi, 1.0);
}

}  // namespace
}  // namespace memento::placement
