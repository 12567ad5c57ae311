// JobReporter for a job that repairs its own MPI world (`memento launch
// --launcher ulfm`): the attempt of each generation, the stage fault armed
// for it, the pid it records, and a fault that takes other ranks with it.
// The whole path, with real node losses, is launch_injob_test.py (ulfm_*).
#include "memento/launch/job_reporter.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "launch_session.h"
#include "scoped_env.h"

namespace memento::launch {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class JobReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("memento-reporter-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    unsetenv("MEMENTO_LAUNCH_FAULT");
    unsetenv("MEMENTO_LAUNCH_FAULTS");
    setenv("MEMENTO_LAUNCH_DIR", dir_.c_str(), 1);
    setenv("MEMENTO_LAUNCH_ATTEMPT", "3", 1);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ScopedEnv env_{"MEMENTO_LAUNCH_DIR", "MEMENTO_LAUNCH_ATTEMPT", "MEMENTO_LAUNCH_FAULT",
                 "MEMENTO_LAUNCH_FAULTS"};
  fs::path dir_;
};

TEST_F(JobReporterTest, WithoutTheLauncherItIsInactiveAndWritesNothing) {
  unsetenv("MEMENTO_LAUNCH_DIR");
  const JobReporter r = JobReporter::ForGeneration(1, 2);
  EXPECT_FALSE(r.active());
  EXPECT_FALSE(r.Hooks().at_stage);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(JobReporterTest, EachGenerationIsAnAttemptOfItsOwnWithItsFaultAndPid) {
  setenv("MEMENTO_LAUNCH_FAULTS", "3=snapshot:2:0,5=recover:*:1,6=seal:9:1", 1);
  const JobReporter g0 = JobReporter::ForGeneration(1, 0);
  EXPECT_EQ(g0.attempt(), 3);
  EXPECT_FALSE(g0.Hooks().at_stage);  // attempt 3's fault is rank 0's
  EXPECT_EQ(Read(dir_ / "pid.a3.r1"), std::to_string(getpid()) + "\n");

  const JobReporter g2 = JobReporter::ForGeneration(1, 2);
  EXPECT_EQ(g2.attempt(), 5);
  EXPECT_TRUE(g2.Hooks().at_stage);  // recover:*:1
  EXPECT_EQ(Read(dir_ / "pid.a5.r1"), std::to_string(getpid()) + "\n");

  const JobReporter g1 = JobReporter::ForGeneration(1, 1);
  EXPECT_EQ(g1.attempt(), 4);
  EXPECT_FALSE(g1.Hooks().at_stage);  // no entry for attempt 4
}

TEST_F(JobReporterTest, SetFaultsOverrideTheSingleFault) {
  // Under --launcher ulfm the list is set (possibly empty) and is the one that counts.
  setenv("MEMENTO_LAUNCH_FAULT", "snapshot:2:1", 1);
  setenv("MEMENTO_LAUNCH_FAULTS", "", 1);
  EXPECT_FALSE(JobReporter::ForGeneration(1, 0).Hooks().at_stage);
  unsetenv("MEMENTO_LAUNCH_FAULTS");
  EXPECT_TRUE(JobReporter::ForGeneration(1, 0).Hooks().at_stage);
}

TEST_F(JobReporterTest, AFaultKillsTheRanksLostWithItThenItself) {
  // Rank 2 of attempt 4 is a process of its own, recorded as the job records it.
  const pid_t other = fork();
  ASSERT_GE(other, 0);
  if (other == 0) {
    pause();
    _exit(0);
  }
  std::ofstream(dir_ / "pid.a4.r2") << other << "\n";
  setenv("MEMENTO_LAUNCH_FAULTS", "4=seal:7:0+2", 1);
  const pid_t self = fork();
  ASSERT_GE(self, 0);
  if (self == 0) {
    const JobReporter r = JobReporter::ForGeneration(0, 1);
    const runtime::FaultHooks hooks = r.Hooks();
    if (!hooks.at_stage) _exit(3);
    (void)hooks.at_stage(runtime::Stage::kSeal, 6);  // another version: nothing happens
    (void)hooks.at_stage(runtime::Stage::kSeal, 7);
    _exit(4);  // not reached: the hook SIGKILLs this process
  }
  int status = 0;
  ASSERT_EQ(waitpid(self, &status, 0), self);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  ASSERT_EQ(waitpid(other, &status, 0), other);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  const std::string fault = Read(dir_ / "fault.a4");
  EXPECT_NE(fault.find("\"stage\":\"seal\""), std::string::npos) << fault;
  EXPECT_NE(fault.find("\"version\":7"), std::string::npos) << fault;
}

// A world that repairs itself reports a generation's restore and steps
// before the launcher has seen the loss that began it (it polls every
// 10 ms; the ranks need not wait for it): read while the launcher is still
// at the attempt before, those events are held until it has begun theirs,
// and then come in the order written. Read at once, that restore was
// dropped (the attempt had no rejoin time, its restore was recorded only at
// the job's end) and its steps counted as the attempt's before.
TEST_F(JobReporterTest, EventsOfAnAttemptAheadOfTheLauncherWaitForIt) {
  detail::AttemptEvents events((dir_ / "events.jsonl").string());
  auto kinds = [](const std::vector<nlohmann::json>& evs) {
    std::string out;
    for (const auto& ev : evs) {
      out += ev.value("event", std::string()) + ":" + std::to_string(ev.value("attempt", -1)) + " ";
    }
    return out;
  };
  const JobReporter g0 = JobReporter::ForGeneration(0, 0);  // attempt 3
  const JobReporter g1 = JobReporter::ForGeneration(0, 1);  // attempt 4
  const JobReporter g2 = JobReporter::ForGeneration(0, 2);  // attempt 5
  g0.Step(2, 0.5, 0.1, 0);
  g1.RestoreBegin();
  g1.Step(3, 0.5, 0.1, 0);
  g2.RestoreBegin();
  JobReporter::ForGeneration(1, 2).RestoreBegin();  // not rank 0: no event
  EXPECT_EQ(kinds(events.Poll(3)), "step:3 ");
  EXPECT_EQ(kinds(events.Poll(3)), "");  // still held
  g2.Step(4, 0.5, 0.1, 0);
  g2.Done(16, "abc");
  EXPECT_EQ(kinds(events.Poll(4)), "restore_begin:4 step:4 ");
  EXPECT_EQ(kinds(events.Poll(5)), "restore_begin:5 step:5 done:5 ");
  // An event without an attempt is the current attempt's.
  std::ofstream(dir_ / "events.jsonl", std::ios::app) << "{\"event\":\"done\",\"step\":1}\n";
  EXPECT_EQ(kinds(events.Poll(5)), "done:-1 ");
  // A relaunch: what the old world had ahead is dropped.
  g2.Step(5, 0.5, 0.1, 0);
  EXPECT_EQ(kinds(events.Poll(4)), "");
  events.DropHeld();
  EXPECT_EQ(kinds(events.Poll(5)), "");
}

}  // namespace
}  // namespace memento::launch
