// The event-driven simulation against the closed form, against the layout's own
// recoverability predicate, and in its limits.
#include "memento/placement/goodput_simulation.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "memento/placement/goodput_model.h"
#include "memento/placement/recoverability.h"
#include "memento/placement/serve_probability.h"
#include "goodput_fixtures.h"

namespace memento::placement {
namespace {

using testing::Costs;
using testing::Failures;
constexpr double kZ999 = 3.290526731491926;  // two-sided 99.9 %

struct Case {
  std::string name;
  int nodes;
  double step_s;
  std::string scheme;
  bool remote_only;
  int k, p;
  FailureProcess failures;
  double relaunch_s;
};

// A grid over schemes, failure kinds, intervals and rates (up to ~25 failures a day with a
// 10-minute relaunch, where second-order terms would show).
std::vector<Case> Grid() {
  return {
      {"replica2_node_process", 16, 1.0, "replica:2", false, 60, 10, Failures(300, 600), 120},
      {"xor3_node_multi", 16, 3.0, "xor:3", false, 20, 5, Failures(400, kNever, kNever, 0, 0.5),
       120},
      {"rs4+2_racks_multi3", 48, 0.5, "rs:4+2", false, 100, 20,
       Failures(500, kNever, 2000, 4, 0.5, 3), 120},
      {"none_node_process", 16, 2.0, "none", false, 30, 3, Failures(400, 200), 120},
      {"remote_only", 64, 1.0, "none", true, 300, 1, Failures(1000), 120},
      {"ring_multi2", 32, 1.0, "replica:2:ring", false, 45, 8,
       Failures(600, kNever, kNever, 0, 2.0), 120},
      {"replica2_heavy", 1024, 1.0, "replica:2", false, 120, 30, Failures(1000, 3000), 600},
      {"replica3_racks", 60, 2.0, "replica:3", false, 40, 6, Failures(500, kNever, 300, 6), 120},
      {"xor7_long_persist", 64, 0.25, "xor:7", false, 400, 50,
       Failures(800, kNever, kNever, 0, 1.0, 2), 300},
  };
}

TEST(GoodputSimulationTest, ClosedFormInsideTheSimulationsInterval) {
  for (const Case& cs : Grid()) {
    SCOPED_TRACE(cs.name);
    auto scheme = Scheme::Parse(cs.scheme);
    ASSERT_TRUE(scheme.ok());
    JobShape job{cs.nodes, 1 << 30, cs.step_s};
    CheckpointCosts c = Costs();
    c.relaunch_s = cs.relaunch_s;
    CheckpointPlan plan{*scheme, cs.remote_only, cs.k, cs.p};
    auto serve = ComputeServeProbabilities(*scheme, cs.nodes, cs.failures);
    ASSERT_TRUE(serve.ok()) << serve.status().ToString();
    auto closed = EvaluateGoodput(job, cs.failures, c, *serve, plan);
    ASSERT_TRUE(closed.ok()) << closed.status().ToString();
    SimulationOptions opt;
    opt.years = 1;
    opt.replicates = 20;
    opt.seed = 7;
    opt.z = kZ999;
    auto sim = SimulateGoodput(job, cs.failures, c, plan, opt);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    EXPECT_GE(closed->goodput, sim->ci_low)
        << "closed " << closed->goodput << " sim " << sim->goodput << " [" << sim->ci_low << ", "
        << sim->ci_high << "]";
    EXPECT_LE(closed->goodput, sim->ci_high)
        << "closed " << closed->goodput << " sim " << sim->goodput << " [" << sim->ci_low << ", "
        << sim->ci_high << "]";
    // The interval is informative: narrower than the waste it is about.
    EXPECT_LT(sim->ci_high - sim->ci_low, 0.25 * (1 - closed->goodput));
    EXPECT_NEAR(sim->failures_per_day, closed->failures_per_day, 0.03 * closed->failures_per_day);
  }
}

TEST(GoodputSimulationTest, NoFailuresIsExactlyTheStallShare) {
  JobShape job{16, 1 << 30, 2.0};
  CheckpointPlan plan{Scheme::Replica(2), false, 10, 5};
  SimulationOptions opt;
  opt.replicates = 3;
  auto sim = SimulateGoodput(job, FailureProcess{}, Costs(), plan, opt);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  // A year is not a whole number of cycles: the last partial cycle is at most one cycle.
  const double cycle = 10 * 2.0 + 0.5;
  EXPECT_NEAR(sim->goodput, 1 - 0.5 / cycle, cycle / (365 * kSecondsPerDay));
  EXPECT_DOUBLE_EQ(sim->ci_low, sim->ci_high);
  EXPECT_EQ(sim->failures_per_day, 0);
}

TEST(GoodputSimulationTest, RemoteOnlyMatchesDaly) {
  // One failure kind, one checkpoint cost: the classic model, simulated.
  const int nodes = 128;
  FailureProcess f = Failures(2000);
  CheckpointCosts c = Costs();
  const double m = f.node_mtbf_s / nodes;
  JobShape job{nodes, 1 << 30, 1.0};
  const int k = static_cast<int>(DalyInterval(c.persist_s, m));
  CheckpointPlan plan{Scheme::None(), true, k, 1};
  SimulationOptions opt;
  opt.replicates = 20;
  opt.z = kZ999;
  auto sim = SimulateGoodput(job, f, c, plan, opt);
  ASSERT_TRUE(sim.ok());
  const double daly = DalyGoodput(k, c.persist_s, c.relaunch_s + c.recover_remote_s, m);
  EXPECT_GE(daly, sim->ci_low) << sim->goodput;
  EXPECT_LE(daly, sim->ci_high) << sim->goodput;
}

TEST(GoodputSimulationTest, ServedByMemoryAgreesWithTheRecoverabilityPredicate) {
  std::mt19937_64 rng(3);
  for (const char* text : {"replica:2", "replica:3", "replica:2:ring", "replica:3:ring", "xor:3",
                           "rs:4+2", "rs:6+3", "none"}) {
    for (int nodes : {7, 16, 30}) {
      for (int per_rack : {0, 4}) {
        auto scheme = Scheme::Parse(text);
        ASSERT_TRUE(scheme.ok());
        if (!scheme->ValidateFor(nodes).ok()) continue;
        FailureProcess f;
        if (per_rack > 0) {
          f.rack_mtbf_s = 1;
          f.nodes_per_rack = per_rack;
        }
        auto topo = TopologyFor(nodes, f);
        ASSERT_TRUE(topo.ok());
        auto layout = GroupLayout::Build(*topo, *scheme);
        ASSERT_TRUE(layout.ok());
        int agree_served = 0, agree_lost = 0;
        for (int trial = 0; trial < 400; ++trial) {
          const int m = 1 + static_cast<int>(rng() % 5);
          std::vector<int> all(nodes);
          for (int i = 0; i < nodes; ++i) all[i] = i;
          std::shuffle(all.begin(), all.end(), rng);
          std::vector<int> failed(all.begin(), all.begin() + m);
          std::vector<char> mask(nodes, 0);
          for (int n : failed) mask[n] = 1;
          const bool expected = IsRecoverable(*layout, mask);
          ASSERT_EQ(ServedByMemory(*layout, failed), expected)
              << text << " N=" << nodes << " racks of " << per_rack << " m=" << m;
          (expected ? agree_served : agree_lost)++;
        }
        if (std::string(text) != "none") {
          EXPECT_GT(agree_served, 0) << text;
        }
        EXPECT_GT(agree_lost, 0) << text << " N=" << nodes;
      }
    }
  }
}

TEST(GoodputSimulationTest, BadOptions) {
  JobShape job{16, 1 << 30, 1.0};
  CheckpointPlan plan{Scheme::Replica(2), false, 10, 5};
  SimulationOptions opt;
  opt.replicates = 1;
  EXPECT_FALSE(SimulateGoodput(job, FailureProcess{}, Costs(), plan, opt).ok());
  opt.replicates = 4;
  opt.years = 0;
  EXPECT_FALSE(SimulateGoodput(job, FailureProcess{}, Costs(), plan, opt).ok());
}

}  // namespace
}  // namespace memento::placement
