// Config::interval at the Checkpointer: which Save calls take a checkpoint, on 2-4 ranks as
// threads over the in-process transport (label local). With auto, every rank has its own fake
// clock and its own step time, and the ranks must still save exactly the same steps (a step
// saved on one rank and skipped on another would leave the commit collective waiting).
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "harness/spawn.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/store_admin.h"

namespace memento::runtime {
namespace {

using testing::RankContext;
using testing::Spawn;

// Time the test sets; every read also moves it by `tick`, so that the time the
// application thread spends inside Save (the stall) is never zero.
class FakeClock final : public placement::TunerClock {
 public:
  explicit FakeClock(double tick) : tick_(tick) {}
  double NowSeconds() override {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += tick_;
    return now_;
  }
  void Advance(double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += seconds;
  }

 private:
  std::mutex mu_;
  double now_ = 1000;
  const double tick_;
};

Config MakeConfig(int interval, double node_mtbf_h) {
  Config c;
  c.job = testing::SpawnJob();
  c.ranks_per_node = 1;
  c.chunk_bytes = 4096;
  c.threads = 1;
  c.persist_every = 0;
  c.timeout_s = 20;
  c.interval = interval;
  c.node_mtbf_h = node_mtbf_h;
  return c;
}

// One phase of training: `steps` steps of `step_s` seconds (on this rank's clock).
struct Phase {
  int steps = 0;
  double step_s = 0;
};

// What one rank saw: the steps it saved, and the interval after each phase.
struct RankLog {
  std::vector<uint64_t> saved;
  std::vector<int> interval_after;
  IntervalStats stats;
  std::optional<uint64_t> latest;
};

// Trains through `phases` on every rank (rank r's steps last (1 + r / 2) times the phase's
// step time) and logs what each rank decided.
std::vector<RankLog> Train(int ranks, const Config& config, const std::vector<Phase>& phases) {
  std::vector<RankLog> logs(ranks);
  Spawn(ranks, [&](RankContext& ctx) {
    FakeClock clock(0.01);
    FaultHooks hooks;
    hooks.interval_clock = &clock;
    auto ck = Checkpointer::Create(config, ctx.transport(), nullptr, hooks);
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    std::vector<uint8_t> buf(20000, static_cast<uint8_t>(ctx.rank()));
    ASSERT_TRUE((*ck)->RegisterBuffer("w", buf.data(), buf.size()).ok());
    RankLog& log = logs[ctx.rank()];
    const double slowdown = 1 + ctx.rank() / 2.0;
    uint64_t step = 0;
    for (const Phase& phase : phases) {
      for (int i = 0; i < phase.steps; ++i) {
        ++step;
        ASSERT_TRUE((*ck)->WaitSnapshot().ok());
        buf[step % buf.size()] ^= 1;
        clock.Advance(phase.step_s * slowdown);
        const bool would = (*ck)->WouldSave(step);
        ASSERT_TRUE((*ck)->Save(step).ok()) << "step " << step;
        ASSERT_EQ((*ck)->Interval().last_saved, would) << "step " << step;
        if (would) log.saved.push_back(step);
      }
      // The interval agreed at the phase's last commit: wait for it, or a
      // rank whose commit thread is still agreeing reports the one before.
      ASSERT_TRUE((*ck)->Wait().ok());
      log.interval_after.push_back((*ck)->Interval().interval_steps);
    }
    ASSERT_TRUE((*ck)->Wait().ok());
    log.stats = (*ck)->Interval();
    log.latest = (*ck)->LatestCommitted();
  });
  testing::OnDriver([] { (void)CleanJob(testing::SpawnJob()); });
  return logs;
}

void ExpectRanksAgree(const std::vector<RankLog>& logs, uint64_t steps) {
  ASSERT_FALSE(logs.empty());
  for (size_t r = 0; r < logs.size(); ++r) {
    EXPECT_EQ(logs[r].saved, logs[0].saved) << "rank " << r;
    EXPECT_EQ(logs[r].interval_after, logs[0].interval_after) << "rank " << r;
    EXPECT_EQ(logs[r].stats.saves, logs[r].saved.size());
    EXPECT_EQ(logs[r].stats.saves + logs[r].stats.skipped, steps);
    ASSERT_TRUE(logs[r].latest.has_value());
    EXPECT_EQ(*logs[r].latest, logs[r].saved.back());
  }
}

TEST(SaveSchedule, EveryNthStep) {
  const auto logs = Train(3, MakeConfig(4, 0), {{18, 1.0}});
  ExpectRanksAgree(logs, 18);
  EXPECT_EQ(logs[0].saved, (std::vector<uint64_t>{4, 8, 12, 16}));
  EXPECT_EQ(logs[0].stats.skipped, 14u);
  EXPECT_FALSE(logs[0].stats.automatic);
  EXPECT_EQ(logs[0].stats.interval_steps, 4);
}

TEST(SaveSchedule, DefaultSavesEveryCall) {
  const auto logs = Train(2, MakeConfig(1, 0), {{6, 1.0}});
  ExpectRanksAgree(logs, 6);
  EXPECT_EQ(logs[0].saved.size(), 6u);
  EXPECT_EQ(logs[0].stats.skipped, 0u);
}

// Steps become 10x shorter: the same time between saves is 10x more steps.
TEST(SaveSchedule, AutoFollowsStepTimeOnEveryRankAlike) {
  const auto logs = Train(4, MakeConfig(Config::kAutoInterval, 10), {{300, 1.0}, {500, 0.1}});
  ExpectRanksAgree(logs, 800);
  const RankLog& log = logs[0];
  EXPECT_TRUE(log.stats.automatic);
  EXPECT_GE(log.stats.changes, 2);
  EXPECT_GT(log.stats.skipped, log.stats.saves);
  // The agreed step time is the slowest rank's (2.5x the phase's).
  EXPECT_NEAR(log.stats.step_s, 0.25, 0.06);
  ASSERT_EQ(log.interval_after.size(), 2u);
  EXPECT_GE(log.interval_after[0], 2);
  EXPECT_GT(log.interval_after[1], 4 * log.interval_after[0]);
  // Saves follow the interval: in the last 100 steps, about 100 / interval of them.
  int recent = 0;
  for (uint64_t s : log.saved) recent += s > 700 ? 1 : 0;
  EXPECT_LE(recent, 100 / log.interval_after[1] + 2);
}

// 100x the failure rate: about a tenth of the interval (sqrt of the rate).
TEST(SaveSchedule, AutoFollowsFailureRate) {
  const auto rare = Train(2, MakeConfig(Config::kAutoInterval, 10), {{400, 0.1}});
  const auto frequent = Train(2, MakeConfig(Config::kAutoInterval, 0.1), {{400, 0.1}});
  ExpectRanksAgree(rare, 400);
  ExpectRanksAgree(frequent, 400);
  EXPECT_GT(rare[0].interval_after[0], 4 * frequent[0].interval_after[0]);
  EXPECT_GT(frequent[0].stats.saves, 2 * rare[0].stats.saves);
}

TEST(SaveSchedule, BadIntervalIsRefusedByName) {
  Config bad = MakeConfig(-3, 0);
  auto ck = Checkpointer::Create(bad, nullptr);
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ck.status().message().find("MEMENTO_INTERVAL"), std::string::npos);
  auto no_rate = Checkpointer::Create(MakeConfig(Config::kAutoInterval, 0), nullptr);
  ASSERT_FALSE(no_rate.ok());
  EXPECT_NE(no_rate.status().message().find("MEMENTO_NODE_MTBF_H"), std::string::npos);
  auto parsed = Config::FromMap({{"MEMENTO_INTERVAL", "often"}});
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("MEMENTO_INTERVAL='often'"), std::string::npos);
}

}  // namespace
}  // namespace memento::runtime
