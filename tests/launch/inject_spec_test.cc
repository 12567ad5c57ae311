// --inject SPEC parsing: forms, random draws reproducible from the seed, and
// bad input named in the error.
#include "memento/launch/inject_spec.h"

#include <gtest/gtest.h>

#include <set>

namespace memento::launch {
namespace {

TEST(InjectSpec, StepStageAndRecoveryEvents) {
  auto ev = ParseInjectSpec("3@10,1+2@7:snapshot,0@recovery,4@5:protect", 8, 1);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  ASSERT_EQ(ev->size(), 4u);
  EXPECT_EQ((*ev)[0].nodes, std::vector<int>{3});
  EXPECT_EQ((*ev)[0].step, 10u);
  EXPECT_EQ((*ev)[0].stage, InjectStage::kStep);
  EXPECT_EQ((*ev)[1].nodes, (std::vector<int>{1, 2}));
  EXPECT_EQ((*ev)[1].stage, InjectStage::kSnapshot);
  EXPECT_EQ((*ev)[2].stage, InjectStage::kRecovery);
  EXPECT_STREQ(EngineStageName((*ev)[2].stage), "recover");
  EXPECT_STREQ(EngineStageName((*ev)[3].stage), "seal");
  EXPECT_EQ((*ev)[1].ToString(), "nodes 1+2 at the snapshot stage of v7");
}

TEST(InjectSpec, AStepWithADelay) {
  auto ev = ParseInjectSpec("3@10+0.25s,1@4-6+2s:step,2@5+0s", 4, 1);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  ASSERT_EQ(ev->size(), 3u);
  EXPECT_EQ((*ev)[0].step, 10u);
  EXPECT_DOUBLE_EQ((*ev)[0].delay_s, 0.25);
  EXPECT_EQ((*ev)[0].ToString(), "node 3 at step 10 + 0.25 s");
  EXPECT_GE((*ev)[1].step, 4u);
  EXPECT_LE((*ev)[1].step, 6u);
  EXPECT_DOUBLE_EQ((*ev)[1].delay_s, 2.0);
  EXPECT_DOUBLE_EQ((*ev)[2].delay_s, 0.0);
  EXPECT_EQ((*ev)[2].ToString(), "node 2 at step 5");
}

TEST(InjectSpec, RandomDrawsAreDistinctInRangeAndReproducible) {
  std::set<std::vector<int>> seen;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    auto a = ParseInjectSpec("rand3@4-9:rand", 8, seed);
    auto b = ParseInjectSpec("rand3@4-9:rand", 8, seed);
    ASSERT_TRUE(a.ok() && b.ok());
    const InjectEvent& e = (*a)[0];
    EXPECT_EQ(e.nodes, (*b)[0].nodes);
    EXPECT_EQ(e.step, (*b)[0].step);
    EXPECT_EQ(e.stage, (*b)[0].stage);
    ASSERT_EQ(e.nodes.size(), 3u);
    EXPECT_LT(e.nodes[0], e.nodes[1]);
    EXPECT_LT(e.nodes[1], e.nodes[2]);
    EXPECT_GE(e.nodes[0], 0);
    EXPECT_LT(e.nodes[2], 8);
    EXPECT_GE(e.step, 4u);
    EXPECT_LE(e.step, 9u);
    EXPECT_NE(e.stage, InjectStage::kPersist);
    EXPECT_NE(e.stage, InjectStage::kRecovery);
    seen.insert(e.nodes);
  }
  EXPECT_GT(seen.size(), 10u);  // the seed matters
}

TEST(InjectSpec, BadInputNamesTheProblem) {
  auto expect_error = [](const std::string& spec, const std::string& needle) {
    auto ev = ParseInjectSpec(spec, 4, 1);
    ASSERT_FALSE(ev.ok()) << spec;
    EXPECT_NE(ev.status().message().find(needle), std::string::npos)
        << spec << ": " << ev.status().message();
  };
  expect_error("7@3", "node 7 does not exist (the job has nodes 0..3)");
  expect_error("1@recovery", "needs an earlier failure");
  expect_error("1@3:teatime", "unknown stage 'teatime'");
  expect_error("1", "missing '@'");
  expect_error("rand5@3", "cannot pick 5 distinct nodes of 4");
  expect_error("1+1@3", "named twice");
  expect_error("1@0", "step must be a number >= 1");
  expect_error("1@9-3", "LO-HI");
  expect_error("1@3+0.5", "delay '0.5' must be seconds 0..3600 ending in 's'");
  expect_error("1@3+s", "delay 's' must be seconds");
  expect_error("1@3+-1s", "delay '-1s' must be seconds");
  expect_error("1@3+4000s", "delay '4000s' must be seconds 0..3600");
  expect_error("1@3+0.5xs", "delay '0.5xs'");
  expect_error("1@3+0.5s:snapshot", "a delay applies to a step, not to the snapshot stage");
  EXPECT_TRUE(ParseInjectSpec("", 4, 1).ok());
}

}  // namespace
}  // namespace memento::launch
