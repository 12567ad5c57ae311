// Reusing a job id (label local). A run that does not restore starts a new
// lineage; Restore takes the versions of the newest lineage only, so a fresh
// run's relaunch restores its own versions, never those of an older run that
// happen to carry higher step numbers, and prune keeps the newest run's.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine/checkpointer_fixture.h"
#include "memento/runtime/directory_remote_store.h"

namespace memento::runtime {
namespace {

using testing::CheckpointerTest;
using JobIdReuseTest = CheckpointerTest;

// Run A trains to v10 and persists; run B, under the same job id, starts
// fresh (no Restore) and saves v1..v3; B's relaunch restores B's v3 from
// memory, not A's v10 from remote, and B's persisted versions were kept.
TEST_F(JobIdReuseTest, FreshRunKeepsAndRestoresItsOwnLowerVersions) {
  Config c = MakeConfig();
  c.persist_every = 1;
  c.persist_keep = 4;
  const int n = 2;
  Launch(n, c, FaultHooks(), /*with_remote=*/true);  // run A
  for (uint64_t step = 1; step <= 10; ++step) {
    for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  Run([&](int r) { EXPECT_TRUE(ranks_[r].ck->WaitPersist().ok()); });
  Launch(n, c, FaultHooks(), /*with_remote=*/true);  // run B: same id, no Restore
  for (uint64_t step = 1; step <= 3; ++step) {
    for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  Run([&](int r) { EXPECT_TRUE(ranks_[r].ck->WaitPersist().ok()); });
  DirectoryRemoteStore remote(remote_dir_, c.job);
  auto complete = remote.ListComplete();
  ASSERT_TRUE(complete.ok()) << complete.status().ToString();
  for (uint64_t v : {1, 2, 3}) {
    EXPECT_NE(std::find(complete->begin(), complete->end(), v), complete->end())
        << "B's v" << v << " was pruned";
  }
  ASSERT_NE(std::find(complete->begin(), complete->end(), 10u), complete->end())
      << "A's v10 should still be on remote for this test to mean anything";

  Launch(n, c, FaultHooks(), /*with_remote=*/true);  // B's relaunch
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 3u) << reports[r]->ToString();
    for (const auto& e : reports[r]->entries) EXPECT_EQ(e.source, RestoreSource::kLocalMemory);
    EXPECT_EQ(ranks_[r].Mismatch(r, 3), -1) << "rank " << r;
  }
  // The relaunch adopted B's lineage: its next save continues it, and a
  // restore after that still finds it (not A's v10).
  for (const Status& s : SaveAll(4)) ASSERT_TRUE(s.ok()) << s.ToString();
  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 4u) << reports[r]->ToString();
    EXPECT_EQ(ranks_[r].Mismatch(r, 4), -1) << "rank " << r;
  }
}

// Memory alone: after run A's v9 and v10, a fresh run B saves only v1 (into
// A's v9 slot); A's v10 is still in memory, but B's relaunch restores B's v1.
TEST_F(JobIdReuseTest, FreshRunRestoresItsOwnVersionOverAnOlderRunsInMemory) {
  const Config c = MakeConfig();
  const int n = 2;
  Launch(n, c);  // run A
  for (uint64_t step = 9; step <= 10; ++step) {
    for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  Launch(n, c);  // run B
  for (const Status& s : SaveAll(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  Launch(n, c);  // B's relaunch
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 1u) << reports[r]->ToString();
    EXPECT_EQ(ranks_[r].Mismatch(r, 1), -1) << "rank " << r;
  }
}

// A relaunch that restores continues the lineage it restored: A, relaunched,
// restores v10 and saves v11; the next relaunch restores v11.
TEST_F(JobIdReuseTest, RelaunchThatRestoresContinuesItsLineage) {
  const Config c = MakeConfig();
  const int n = 2;
  Launch(n, c);
  for (const Status& s : SaveAll(10)) ASSERT_TRUE(s.ok()) << s.ToString();
  Launch(n, c);
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(reports[r].ok() && reports[r]->version == 10u);
  for (const Status& s : SaveAll(11)) ASSERT_TRUE(s.ok()) << s.ToString();
  Launch(n, c);
  reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 11u);
    EXPECT_EQ(ranks_[r].Mismatch(r, 11), -1);
  }
}

}  // namespace
}  // namespace memento::runtime
