// IntervalTuner with a fake clock: the interval follows step time and failure rate.
#include "memento/placement/interval_tuner.h"

#include <gtest/gtest.h>

#include <cmath>

#include "memento/placement/goodput_model.h"

namespace memento::placement {
namespace {

class FakeClock final : public TunerClock {
 public:
  double NowSeconds() override { return now; }
  double now = 1000;
};

// Runs `steps` training steps of `step_s` each; a saved step stalls for `stall_s` and
// commits `protect_s` after the save. Returns the number of saves.
int Train(IntervalTuner& tuner, FakeClock& clock, int64_t& step, int steps, double step_s,
          double stall_s, double protect_s) {
  int saves = 0;
  for (int i = 0; i < steps; ++i, ++step) {
    clock.now += step_s;
    if (tuner.ShouldSave(step)) {
      ++saves;
      clock.now += stall_s;
      tuner.RecordStall(stall_s);
      tuner.RecordProtect(protect_s);
    }
  }
  return saves;
}

// The first-order optimum in steps: sqrt(2 stall / rate) / step.
double Young(double stall_s, double rate, double step_s) {
  return YoungInterval(stall_s, 1 / rate) / step_s;
}

TEST(IntervalTunerTest, FollowsStepTime) {
  FakeClock clock;
  IntervalTunerOptions opt;
  opt.failure_rate_per_s = 1 / 3600.0;  // one rollback an hour
  auto tuner = IntervalTuner::Create(opt, &clock);
  ASSERT_TRUE(tuner.ok());
  int64_t step = 0;
  Train(*tuner, clock, step, 2000, 0.5, 0.5, 0.5);
  // sqrt(2 * 0.5 * 3600) = 60 s: 120 steps of 0.5 s.
  EXPECT_NEAR(tuner->interval_steps(), Young(0.5, opt.failure_rate_per_s, 0.5), 12);
  EXPECT_NEAR(tuner->step_s(), 0.5, 1e-9);
  const int before = tuner->interval_steps();
  // Steps become 4x slower: the same 60 s is 30 steps.
  Train(*tuner, clock, step, 600, 2.0, 0.5, 0.5);
  EXPECT_NEAR(tuner->interval_steps(), Young(0.5, opt.failure_rate_per_s, 2.0), 3);
  EXPECT_LT(tuner->interval_steps(), before / 3);
  ASSERT_GE(tuner->changes().size(), 2u);
  EXPECT_EQ(tuner->changes().back().to_steps, tuner->interval_steps());
  EXPECT_NE(tuner->changes().back().ToString().find("checkpoint interval"), std::string::npos);
}

TEST(IntervalTunerTest, FollowsFailureRate) {
  FakeClock clock;
  IntervalTunerOptions opt;
  opt.failure_rate_per_s = 1 / 7200.0;
  auto tuner = IntervalTuner::Create(opt, &clock);
  ASSERT_TRUE(tuner.ok());
  int64_t step = 0;
  Train(*tuner, clock, step, 3000, 1.0, 0.25, 0.25);
  const int slow = tuner->interval_steps();
  EXPECT_NEAR(slow, Young(0.25, 1 / 7200.0, 1.0), 6);  // 60
  tuner->SetFailureRate(4 / 7200.0);                   // 4x the failures: half the interval
  Train(*tuner, clock, step, 200, 1.0, 0.25, 0.25);
  EXPECT_NEAR(tuner->interval_steps(), Young(0.25, 4 / 7200.0, 1.0), 3);  // 30
  EXPECT_NEAR(static_cast<double>(slow) / tuner->interval_steps(), 2.0, 0.25);
}

TEST(IntervalTunerTest, SavesEveryIntervalStepsAndRespectsProtectTime) {
  FakeClock clock;
  IntervalTunerOptions opt;
  opt.failure_rate_per_s = 1 / 60.0;  // very frequent: Young alone would save every ~2 steps
  auto tuner = IntervalTuner::Create(opt, &clock);
  ASSERT_TRUE(tuner.ok());
  int64_t step = 0;
  // Protect takes 10 s: never two protects in flight, so at least ~10 steps of 1 s apart.
  Train(*tuner, clock, step, 500, 1.0, 0.1, 10.0);
  const int k = tuner->interval_steps();
  EXPECT_GE(k * 1.0 + 0.1, 10.0 - 1e-9);
  EXPECT_LE(k, 11);
  // Saved steps are exactly k apart once settled.
  int64_t last = -1;
  for (int i = 0; i < 100; ++i, ++step) {
    clock.now += 1.0;
    if (tuner->ShouldSave(step)) {
      if (last >= 0) {
        EXPECT_EQ(step - last, k);
      }
      last = step;
      clock.now += 0.1;
      tuner->RecordStall(0.1);
      tuner->RecordProtect(10.0);
    }
  }
  EXPECT_GE(last, 0);
}

TEST(IntervalTunerTest, HysteresisKeepsTheIntervalUnderNoise) {
  FakeClock clock;
  IntervalTunerOptions opt;
  opt.failure_rate_per_s = 1 / 3600.0;
  auto tuner = IntervalTuner::Create(opt, &clock);
  ASSERT_TRUE(tuner.ok());
  int64_t step = 0;
  Train(*tuner, clock, step, 2000, 1.0, 0.5, 0.5);
  const size_t changes = tuner->changes().size();
  // +-3 % jitter in step time moves the optimum by ~3 %: below the 10 % hysteresis.
  for (int i = 0; i < 2000; ++i) {
    Train(*tuner, clock, step, 1, (i % 2) ? 1.03 : 0.97, 0.5, 0.5);
  }
  EXPECT_EQ(tuner->changes().size(), changes);
}

// Measurements from elsewhere (the numbers agreed across ranks): the interval follows them
// at once, and two tuners fed the same sequence choose the same intervals.
TEST(IntervalTunerTest, UpdateWithAgreedMeasurements) {
  FakeClock clock;
  IntervalTunerOptions opt;
  opt.initial_interval_steps = 1;
  opt.failure_rate_per_s = 1 / 3600.0;
  auto a = IntervalTuner::Create(opt, &clock);
  auto b = IntervalTuner::Create(opt, &clock);
  ASSERT_TRUE(a.ok() && b.ok());
  for (auto* t : {&*a, &*b}) t->Update(10, 0.5, 0.5, 0.5);
  EXPECT_NEAR(a->interval_steps(), Young(0.5, opt.failure_rate_per_s, 0.5), 12);
  const int fast = a->interval_steps();
  for (auto* t : {&*a, &*b}) t->Update(20, 2.0, 0.5, 0.5);
  EXPECT_NEAR(a->interval_steps(), Young(0.5, opt.failure_rate_per_s, 2.0), 3);
  EXPECT_LT(a->interval_steps(), fast / 3);
  const int slow = a->interval_steps();
  for (auto* t : {&*a, &*b}) {
    t->SetFailureRate(16 / 3600.0);  // 16x the failures: a quarter of the interval
    t->Update(30, 2.0, 0.5, 0.5);
  }
  EXPECT_NEAR(a->interval_steps(), slow / 4.0, 2);
  EXPECT_EQ(a->interval_steps(), b->interval_steps());
  ASSERT_EQ(a->changes().size(), 3u);
  EXPECT_EQ(a->changes()[2].step, 30);
  // Nonsense is ignored.
  a->Update(40, 0, 0.5, 0.5);
  a->Update(40, 1, -1, 0.5);
  EXPECT_EQ(a->changes().size(), 3u);
}

// With no failures nothing is lost by waiting: the interval goes to the
// longest allowed, also when the stall is 0 and every interval is as good.
TEST(IntervalTunerTest, NoFailuresGoToTheLongestInterval) {
  FakeClock clock;
  IntervalTunerOptions opt;
  opt.initial_interval_steps = 1;
  opt.failure_rate_per_s = 0;
  opt.max_interval_steps = 1000;
  for (double stall : {0.5, 0.0}) {
    auto tuner = IntervalTuner::Create(opt, &clock);
    ASSERT_TRUE(tuner.ok());
    tuner->Update(10, 1.0, stall, stall);
    EXPECT_EQ(tuner->interval_steps(), 1000) << "stall " << stall;
  }
}

TEST(IntervalTunerTest, InitialIntervalAndBadOptions) {
  FakeClock clock;
  IntervalTunerOptions opt;
  opt.initial_interval_steps = 5;
  auto tuner = IntervalTuner::Create(opt, &clock);
  ASSERT_TRUE(tuner.ok());
  EXPECT_TRUE(tuner->ShouldSave(0));  // the first offer is saved
  EXPECT_FALSE(tuner->ShouldSave(1));
  EXPECT_FALSE(tuner->ShouldSave(4));
  EXPECT_TRUE(tuner->ShouldSave(5));

  IntervalTunerOptions bad;
  bad.failure_rate_per_s = -1;
  EXPECT_FALSE(IntervalTuner::Create(bad, &clock).ok());
  bad = IntervalTunerOptions{};
  bad.smoothing = 0;
  EXPECT_FALSE(IntervalTuner::Create(bad, &clock).ok());
  EXPECT_FALSE(IntervalTuner::Create(IntervalTunerOptions{}, nullptr).ok());
}

}  // namespace
}  // namespace memento::placement
