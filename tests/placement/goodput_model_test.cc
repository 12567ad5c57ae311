// Closed-form goodput model: limits, Young/Daly, validation, monotonicity, optimisation.
#include "memento/placement/goodput_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "goodput_fixtures.h"

namespace memento::placement {
namespace {

using testing::Costs;
using testing::Job;

TEST(GoodputModelTest, NoFailuresGoodputIsOneMinusStallPerCycle) {
  for (int k : {1, 3, 50}) {
    CheckpointPlan plan{Scheme::Replica(2), false, k, 4};
    auto e = EvaluateGoodput(Job(64, 2.0), FailureProcess{}, Costs(), {1, 1, 1}, plan);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    const double cycle = k * 2.0 + 0.5;
    EXPECT_DOUBLE_EQ(e->goodput, 1 - 0.5 / cycle);
    EXPECT_DOUBLE_EQ(e->failures_per_day, 0);
    EXPECT_NEAR(e->stall_s_per_day, 0.5 / cycle * kSecondsPerDay, 1e-6);
  }
  // Every step saved: 1 - stall/(T + stall).
  auto e = EvaluateGoodput(Job(8, 1.0), FailureProcess{}, Costs(), {1, 1, 1},
                           CheckpointPlan{Scheme::Xor(3), false, 1, 1});
  ASSERT_TRUE(e.ok());
  EXPECT_DOUBLE_EQ(e->goodput, 1 - 0.5 / 1.5);
}

// Recoveries far longer than the time between failures: every term stays a
// number and the day still adds up (all of it recovering, nothing kept).
TEST(GoodputModelTest, RecoveriesThatNeverFinishStillAddUpToADay) {
  CheckpointCosts c = Costs();
  c.recover_remote_s = 1e6;
  for (int nodes : {1000, 100000}) {
    FailureProcess f;
    f.node_mtbf_s = 1e5;
    auto e = EvaluateGoodput(Job(nodes, 1.0), f, c, {0, 0, 0},
                             CheckpointPlan{Scheme::None(), true, 100000, 1});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    for (double v : {e->goodput, e->stall_s_per_day, e->lost_s_per_day, e->recovery_s_per_day}) {
      EXPECT_TRUE(std::isfinite(v)) << nodes;
    }
    EXPECT_NEAR(e->goodput * kSecondsPerDay + e->stall_s_per_day + e->lost_s_per_day +
                    e->recovery_s_per_day,
                kSecondsPerDay, 1e-6 * kSecondsPerDay)
        << nodes;
  }
}

TEST(GoodputModelTest, RemoteOnlyIsDalysCompleteModel) {
  // Remote-only: checkpoint cost C = persist time, restart R = relaunch + remote read,
  // job MTBF M = node MTBF / N. Daly (2006), eq. for exponential failures with restarts.
  for (double node_mtbf_h : {1000.0, 5000.0, 50000.0}) {
    for (int k : {10, 100, 1000}) {
      for (int nodes : {16, 1024}) {
        FailureProcess f;
        f.node_mtbf_s = node_mtbf_h * 3600;
        const CheckpointCosts c = Costs();
        CheckpointPlan plan{Scheme::None(), true, k, 7};
        auto e = EvaluateGoodput(Job(nodes, 1.5), f, c, {0, 0, 0}, plan);
        ASSERT_TRUE(e.ok()) << e.status().ToString();
        const double m = f.node_mtbf_s / nodes;
        const double daly = DalyGoodput(k * 1.5, c.persist_s, c.relaunch_s + c.recover_remote_s, m);
        EXPECT_NEAR(e->goodput, daly, 1e-12 * daly) << node_mtbf_h << " " << k << " " << nodes;
      }
    }
  }
}

TEST(GoodputModelTest, RemoteOnlyOptimumIsYoungDaly) {
  FailureProcess f;
  f.node_mtbf_s = 20000.0 * 3600;  // N = 512: job MTBF ~39 h
  const int nodes = 512;
  CheckpointCosts c = Costs();
  auto best = OptimizeIntervals(Job(nodes, 0.25), f, c, {0, 0, 0}, Scheme::None(), true);
  ASSERT_TRUE(best.ok()) << best.status().ToString();
  const double m = f.node_mtbf_s / nodes;
  const double tau = best->plan.save_every_steps * 0.25;
  // Daly's first-order optimum sqrt(2CM) - C, and Young's sqrt(2CM), C << M.
  EXPECT_NEAR(tau, DalyInterval(c.persist_s, m), 0.02 * DalyInterval(c.persist_s, m));
  EXPECT_NEAR(tau, YoungInterval(c.persist_s, m), 0.05 * YoungInterval(c.persist_s, m));
  // And it is the maximum of Daly's complete model over the integers around it.
  for (int dk : {-40, -4, 4, 40}) {
    const double other = (best->plan.save_every_steps + dk) * 0.25;
    EXPECT_GE(best->estimate.goodput,
              DalyGoodput(other, c.persist_s, c.relaunch_s + c.recover_remote_s, m) - 1e-15);
  }
}

TEST(GoodputModelTest, MemoryServingBeatsRemoteAndProbabilityMatters) {
  FailureProcess f;
  f.node_mtbf_s = 2000.0 * 3600;
  f.process_mtbf_s = 4000.0 * 3600;
  const auto job = Job(4096, 2.0);
  CheckpointPlan plan{Scheme::Replica(2), false, 30, 20};
  auto served = EvaluateGoodput(job, f, Costs(), {1, 1, 1}, plan);
  auto half = EvaluateGoodput(job, f, Costs(), {0.5, 1, 1}, plan);
  auto none = EvaluateGoodput(job, f, Costs(), {0, 1, 1}, plan);
  ASSERT_TRUE(served.ok() && half.ok() && none.ok());
  EXPECT_GT(served->goodput, half->goodput);
  EXPECT_GT(half->goodput, none->goodput);
  EXPECT_NEAR(served->memory_served_fraction, 1, 1e-12);
  // Process failures (a third of the rate) are always served by the local copy.
  EXPECT_NEAR(none->memory_served_fraction, 1.0 / 3, 1e-12);
  // The day adds up.
  for (const auto& e : {*served, *half, *none}) {
    EXPECT_NEAR(
        e.goodput * kSecondsPerDay + e.stall_s_per_day + e.lost_s_per_day + e.recovery_s_per_day,
        kSecondsPerDay, 1e-6);
    EXPECT_NEAR(e.failures_per_day, 4096 * 24 * (1 / 2000.0 + 1 / 4000.0), 1e-9);
  }
}

TEST(GoodputModelTest, MoreFailuresLessGoodput) {
  double previous = 1;
  for (double mtbf_h : {1e6, 1e5, 1e4, 1e3}) {
    FailureProcess f;
    f.node_mtbf_s = mtbf_h * 3600;
    f.rack_mtbf_s = mtbf_h * 3600;
    f.nodes_per_rack = 16;
    f.multi_events_per_day = 0.1;
    auto e = EvaluateGoodput(Job(1024, 1.0), f, Costs(), {0.999, 0.9, 0.8},
                             CheckpointPlan{Scheme::ReedSolomon(6, 2), false, 60, 10});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_LT(e->goodput, previous);
    EXPECT_GE(e->goodput, 0);
    previous = e->goodput;
  }
}

TEST(GoodputModelTest, BadInputNamesTheField) {
  FailureProcess f;
  f.node_mtbf_s = -5;
  auto e = EvaluateGoodput(Job(16, 1.0), f, Costs(), {1, 1, 1},
                           CheckpointPlan{Scheme::Replica(2), false, 1, 1});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().ToString().find("node_mtbf_s"), std::string::npos) << e.status().ToString();

  CheckpointCosts c = Costs();
  c.protect_s = 0.1;  // below the stall
  e = EvaluateGoodput(Job(16, 1.0), FailureProcess{}, c, {1, 1, 1},
                      CheckpointPlan{Scheme::Replica(2), false, 1, 1});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().ToString().find("protect_s"), std::string::npos);

  e = EvaluateGoodput(Job(16, 0), FailureProcess{}, Costs(), {1, 1, 1},
                      CheckpointPlan{Scheme::Replica(2), false, 1, 1});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().ToString().find("step_s"), std::string::npos);

  e = EvaluateGoodput(Job(16, 1.0), FailureProcess{}, Costs(), {1, 1, 1},
                      CheckpointPlan{Scheme::Replica(2), false, 0, 1});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().ToString().find("save_every_steps"), std::string::npos);

  e = EvaluateGoodput(Job(16, 1.0), FailureProcess{}, Costs(), {1.5, 1, 1},
                      CheckpointPlan{Scheme::Replica(2), false, 1, 1});
  EXPECT_FALSE(e.ok());
  e = EvaluateGoodput(Job(2, 1.0), FailureProcess{}, Costs(), {1, 1, 1},
                      CheckpointPlan{Scheme::ReedSolomon(4, 2), false, 1, 1});
  EXPECT_FALSE(e.ok());  // rs:4+2 cannot protect 2 nodes
}

TEST(GoodputModelTest, OptimumRespectsProtectAndPersistTimes) {
  FailureProcess f;
  f.node_mtbf_s = 100.0 * 3600;  // frequent failures push the interval down
  CheckpointCosts c = Costs();
  c.protect_s = 20;
  c.persist_s = 300;
  auto best = OptimizeIntervals(Job(1024, 0.5), f, c, {1, 1, 1}, Scheme::Replica(2), false);
  ASSERT_TRUE(best.ok()) << best.status().ToString();
  const double cycle = best->plan.save_every_steps * 0.5 + c.stall_s;
  EXPECT_GE(cycle + 1e-9, c.protect_s);
  EXPECT_GE(best->plan.persist_every_saves * cycle + 1e-9, c.persist_s);
  // Nothing nearby is better.
  for (int dk : {-1, 1}) {
    for (int dp : {-1, 0, 1}) {
      CheckpointPlan other = best->plan;
      other.save_every_steps += dk;
      other.persist_every_saves += dp;
      const double oc = other.save_every_steps * 0.5 + c.stall_s;
      if (other.save_every_steps < 1 || other.persist_every_saves < 1 || oc < c.protect_s ||
          other.persist_every_saves * oc < c.persist_s) {
        continue;
      }
      auto e = EvaluateGoodput(Job(1024, 0.5), f, c, {1, 1, 1}, other);
      ASSERT_TRUE(e.ok());
      EXPECT_LE(e->goodput, best->estimate.goodput + 1e-12);
    }
  }
}

}  // namespace
}  // namespace memento::placement
