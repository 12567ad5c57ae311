// A run that ends normally (Checkpointer::Finish) is marked finished, its
// node stores are freed (or kept, marked), and a later run under the same job
// id starts fresh unless asked to resume it (label local: ranks as threads).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/checkpointer_fixture.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/shm_segment.h"

namespace memento::runtime {
namespace {

using testing::CheckpointerTest;
using testing::FailAt;

class FinishTestBase : public CheckpointerTest {
 protected:
  std::vector<Status> FinishAll() {
    std::vector<Status> out(ranks_.size());
    Run([&](int r) { out[r] = ranks_[r].ck->Finish(); });
    return out;
  }
  std::vector<std::string> Segments() const {
    auto names = ShmSegment::List(NodeStore::JobPrefix(job_));
    EXPECT_TRUE(names.ok()) << names.status().ToString();
    return names.ok() ? *names : std::vector<std::string>();
  }
  // Every rank's store's finished mark (rank r's store is lane 0 of its virtual node).
  std::vector<std::optional<FinishedRun>> Marks() {
    std::vector<std::optional<FinishedRun>> out;
    for (const std::string& name : Segments()) {
      auto store = NodeStore::AttachByName(name, ShmSegment::Access::kReadOnly);
      EXPECT_TRUE(store.ok()) << store.status().ToString();
      if (store.ok()) out.push_back(store->Finished());
    }
    return out;
  }
  void Train(const Config& c, int n, uint64_t steps, bool with_remote = false) {
    Launch(n, c, FaultHooks(), with_remote);
    for (uint64_t step = 1; step <= steps; ++step) {
      for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
  void ExpectFreshStart(const std::string& step) {
    for (const auto& r : RestoreAll()) {
      ASSERT_FALSE(r.ok()) << "restored " << r->ToString();
      EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
      EXPECT_NE(r.status().message().find("finished at step " + step), std::string::npos)
          << r.status().ToString();
      EXPECT_NE(r.status().message().find("MEMENTO_RESUME_FINISHED=1"), std::string::npos);
    }
  }
};

using Finish = FinishTestBase;

// Default: the marker is agreed, every rank unlinks its store, and the same
// command run again starts fresh; its own relaunch after a crash restores its
// own versions.
TEST_F(Finish, NormalEndFreesTheStoresAndTheNextRunStartsFresh) {
  const Config c = MakeConfig();
  const int n = 3;
  Train(c, n, 3);
  ASSERT_EQ(Segments().size(), 3u);
  for (const Status& s : FinishAll()) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Segments().empty()) << "a finished run's node stores are unlinked";
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(ranks_[r].ck->Save(4).code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(ranks_[r].ck->Finish().ok()) << "a second Finish does nothing";
  }

  // Nothing in memory: a plain fresh start.
  Launch(n, c);
  for (const auto& r : RestoreAll()) EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  for (const Status& s : SaveAll(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  Launch(n, c);  // a crash and relaunch of the new run: it restores as always
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 1u);
    EXPECT_EQ(ranks_[r].Mismatch(r, 1), -1);
  }
}

// keep_finished: the stores stay, each marked with the run and its last step;
// the next run starts fresh, and with resume_finished restores that step from
// memory and removes the marks, so that its own crash later restores as usual.
TEST_F(Finish, KeptStoresAreMarkedAndResumedOnlyWhenAsked) {
  Config c = MakeConfig();
  c.keep_finished = true;
  const int n = 2;
  Train(c, n, 3);
  const uint64_t lineage = ranks_[0].ck->Position().lineage;
  for (const Status& s : FinishAll()) EXPECT_TRUE(s.ok()) << s.ToString();
  auto marks = Marks();
  ASSERT_EQ(marks.size(), 2u);
  for (const auto& m : marks) {
    ASSERT_TRUE(m.has_value()) << "a kept store carries the finished mark";
    EXPECT_EQ(m->version, 3u);
    EXPECT_EQ(m->lineage, lineage);
  }

  Launch(n, c);  // the same command again
  ExpectFreshStart("3");
  EXPECT_EQ(Marks().size(), 2u);

  Config resume = c;
  resume.resume_finished = true;
  Launch(n, resume);
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 3u);
    EXPECT_EQ(ranks_[r].Mismatch(r, 3), -1) << "rank " << r;
  }
  for (const auto& m : Marks()) EXPECT_FALSE(m.has_value()) << "a resumed run is not finished";
  Launch(n, c);  // the resumed run crashed before its next commit: restored, not fresh
  reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 3u);
  }
}

// A run whose last version did not commit (its seal failed) is not marked
// and keeps its stores, even when the training loop's Wait already reported
// the failure: its relaunch restores the last committed version.
TEST_F(Finish, AfterAFailedSaveNothingIsMarked) {
  const Config c = MakeConfig();
  const int n = 2;
  Launch(n, c, FailAt(Stage::kSeal, {2}, "seal"));
  for (const Status& s : SaveAll(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  for (const Status& s : SaveAll(2)) EXPECT_FALSE(s.ok()) << "v2 committed";
  for (const Status& s : FinishAll()) EXPECT_TRUE(s.ok()) << s.ToString();  // Wait reported it
  EXPECT_EQ(Segments().size(), 2u) << "a run whose last save failed keeps its stores";
  for (const auto& m : Marks()) EXPECT_FALSE(m.has_value());
  Launch(n, c);
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 1u);
    EXPECT_EQ(ranks_[r].Mismatch(r, 1), -1);
  }
}

// A Save refused before it copied anything (a step that does not increase,
// on rank 1 only) or a failure the layer above noted (NoteFailedSave: its
// own part of the save failed, on rank 0) is this rank's last save failing
// too: nothing is marked, the stores stay. A Save that starts a version
// afterwards clears it.
TEST_F(Finish, AfterASaveRefusedOrNotedFailedNothingIsMarked) {
  const Config c = MakeConfig();
  const int n = 2;
  Launch(n, c);
  for (const Status& s : SaveAll(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ranks_[1].ck->Save(1).code(), StatusCode::kInvalidArgument);  // not increasing
  for (const Status& s : FinishAll()) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Segments().size(), 2u) << "a run whose last save was refused keeps its stores";
  for (const auto& m : Marks()) EXPECT_FALSE(m.has_value());

  Launch(n, c);
  for (const auto& r : RestoreAll()) ASSERT_TRUE(r.ok()) << r.status().ToString();
  ranks_[0].ck->NoteFailedSave();
  for (const auto& s : FinishAll()) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Segments().size(), 2u) << "a failure noted by the layer above is a failed save";

  Launch(n, c);
  for (const auto& r : RestoreAll()) ASSERT_TRUE(r.ok()) << r.status().ToString();
  ranks_[0].ck->NoteFailedSave();
  for (const Status& s : SaveAll(2)) ASSERT_TRUE(s.ok()) << s.ToString();
  for (const auto& s : FinishAll()) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Segments().empty()) << "v2 committed after the failure: a normal end";
}

// Memory gone, the remote tier holds the finished run's versions and its
// mark: the next run starts fresh; resume_finished restores the newest
// persisted version. An older run's remote versions are never restored in
// place of a finished run's.
TEST_F(Finish, RemoteOnlyFinishedRunStartsFreshUnlessResumed) {
  Config c = MakeConfig();
  c.persist_every = 2;
  c.persist_keep = 4;
  const int n = 2;
  Train(c, n, 4, /*with_remote=*/true);  // v2 and v4 persisted
  for (const Status& s : FinishAll()) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Segments().empty());
  DirectoryRemoteStore remote(remote_dir_, c.job);
  auto mark = remote.ReadFinished();
  ASSERT_TRUE(mark.ok() && mark->has_value()) << mark.status().ToString();
  EXPECT_EQ((*mark)->version, 4u);

  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  ExpectFreshStart("4");

  // A later run that saves one unpersisted step and finishes: the run before
  // it (v2, v4 on remote) is older than the finished one and stays passed over.
  for (const Status& s : SaveAll(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  for (const Status& s : FinishAll()) EXPECT_TRUE(s.ok()) << s.ToString();
  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  ExpectFreshStart("1");

  Config resume = c;
  resume.resume_finished = true;
  Launch(n, resume, FaultHooks(), /*with_remote=*/true);
  for (const auto& r : RestoreAll()) {
    ASSERT_FALSE(r.ok()) << "restored an older run's v" << r->version;
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_NE(r.status().message().find("left no version to resume"), std::string::npos)
        << r.status().ToString();
  }
}

TEST_F(Finish, RemoteFinishedRunIsResumedFromTheRemoteTier) {
  Config c = MakeConfig();
  c.persist_every = 2;
  c.persist_keep = 4;
  const int n = 2;
  Train(c, n, 5, /*with_remote=*/true);  // v2, v4 persisted; v5 only in memory
  for (const Status& s : FinishAll()) EXPECT_TRUE(s.ok()) << s.ToString();
  Config resume = c;
  resume.resume_finished = true;
  Launch(n, resume, FaultHooks(), /*with_remote=*/true);
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 4u);
    for (const auto& e : reports[r]->entries) EXPECT_EQ(e.source, RestoreSource::kRemote);
    EXPECT_EQ(ranks_[r].Mismatch(r, 4), -1) << "rank " << r;
  }
  DirectoryRemoteStore remote(remote_dir_, c.job);
  auto mark = remote.ReadFinished();
  ASSERT_TRUE(mark.ok()) << mark.status().ToString();
  EXPECT_FALSE(mark->has_value()) << "the resumed run's remote mark is removed";
}

// The last persist failed: memory holds the only copy of the run's last
// version. Finish says so (it returned OK, and every rank unlinked its store:
// the run "finished at step 3" with v2 its newest copy anywhere), keeps the
// stores, marked finished, and a resumed run restores v3 from them.
TEST_F(Finish, AFailedLastPersistKeepsTheStoresAndIsReported) {
  Config c = MakeConfig();
  c.persist_every = 1;
  const int n = 2;
  Launch(n, c, FailAt(Stage::kPersist, {3}, "persist"), /*with_remote=*/true);
  for (uint64_t step = 1; step <= 3; ++step) {
    for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::vector<Status> finished = FinishAll();
  int reported = 0;
  for (const Status& s : finished) {
    if (s.ok()) continue;
    ++reported;
    EXPECT_NE(s.message().find("the last persist failed"), std::string::npos) << s.ToString();
  }
  EXPECT_GE(reported, 1);
  EXPECT_EQ(Segments().size(), static_cast<size_t>(n));
  for (const auto& mark : Marks()) {
    ASSERT_TRUE(mark.has_value());
    EXPECT_EQ(mark->version, 3u);
  }
  Config resume = c;
  resume.resume_finished = true;
  Launch(n, resume, FaultHooks(), /*with_remote=*/true);
  ExpectRestored(RestoreAll(), 3);
}

}  // namespace
}  // namespace memento::runtime
