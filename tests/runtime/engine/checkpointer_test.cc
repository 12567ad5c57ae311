// The engine over the in-process transport (label local): every rank is a
// thread with its own Checkpointer and its own node store segment (virtual
// nodes, MEMENTO_RANKS_PER_NODE=1).
#include "memento/runtime/checkpointer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/checkpointer_fixture.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/inprocess_transport.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"
#include "test_pattern.h"

namespace memento::runtime {
namespace {

using testing::CheckpointerTest;
using testing::FailAt;
using testing::kEntryBytes;
using testing::Pattern;

class CheckpointerRanksTest : public CheckpointerTest, public ::testing::WithParamInterface<int> {};

TEST_P(CheckpointerRanksTest, SaveRestoreBitExactAfterRelaunch) {
  const int n = GetParam();
  Launch(n, MakeConfig());
  for (uint64_t step : {1, 2, 3}) {
    for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  for (auto& r : ranks_) EXPECT_EQ(r.ck->LatestCommitted(), std::optional<uint64_t>(3));
  Launch(n, MakeConfig());  // "relaunch": new transports, stores re-attached
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 3u);
    ASSERT_EQ(reports[r]->entries.size(), kEntryBytes.size());
    for (const auto& e : reports[r]->entries) EXPECT_EQ(e.source, RestoreSource::kLocalMemory);
    EXPECT_EQ(ranks_[r].Mismatch(r, 3), -1) << "rank " << r;
    EXPECT_EQ(ranks_[r].ck->LatestCommitted(), std::optional<uint64_t>(3));
  }
  // Saving continues after a restore, into the other slot.
  for (const Status& s : SaveAll(4)) ASSERT_TRUE(s.ok()) << s.ToString();
}

INSTANTIATE_TEST_SUITE_P(Ranks, CheckpointerRanksTest, ::testing::Values(1, 2, 4, 8));

TEST_F(CheckpointerTest, WritesAfterWaitSnapshotDoNotChangeTheSavedVersion) {
  Launch(2, MakeConfig());
  std::vector<Status> waits(2);
  Run([&](int r) {
    ranks_[r].Fill(r, 1);
    ASSERT_TRUE(ranks_[r].ck->Save(1).ok());
    ASSERT_TRUE(ranks_[r].ck->WaitSnapshot().ok());
    ranks_[r].Fill(r, 99);  // the "optimizer step" overwrites the buffers at once
    waits[r] = ranks_[r].ck->Wait();
  });
  for (const Status& s : waits) ASSERT_TRUE(s.ok()) << s.ToString();
  auto reports = RestoreAll();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 1u);
    EXPECT_EQ(ranks_[r].Mismatch(r, 1), -1);
  }
}

TEST_F(CheckpointerTest, CommitIsAllOrNothing) {
  // Rank 2 fails to seal version 2: no rank may commit it. Hooks are per
  // Checkpointer; the failing one is installed for rank 2 only.
  const int n = 4;
  ranks_.clear();
  group_ = InProcessGroup::Create(n, std::chrono::seconds(20));
  ranks_.resize(n);
  for (int r = 0; r < n; ++r) {
    FaultHooks h;
    if (r == 2) {
      h.at_stage = [](Stage stage, uint64_t version) {
        if (stage == Stage::kSeal && version == 2) return Status::IoError("injected seal failure");
        return Status::Ok();
      };
    }
    auto ck = Checkpointer::Create(MakeConfig(), group_->transport(r), nullptr, h);
    ASSERT_TRUE(ck.ok());
    ranks_[r].ck = std::move(ck).value();
    ranks_[r].bufs.emplace_back(50000 + r);
    ASSERT_TRUE(ranks_[r].ck->RegisterBuffer("w", ranks_[r].bufs[0].data(), 50000 + r).ok());
  }
  for (const Status& s : SaveAll(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  auto second = SaveAll(2);
  for (int r = 0; r < n; ++r) {
    EXPECT_FALSE(second[r].ok()) << "rank " << r << " committed v2";
    EXPECT_EQ(ranks_[r].ck->LatestCommitted(), std::optional<uint64_t>(1));
  }
  EXPECT_NE(second[2].message().find("injected seal failure"), std::string::npos)
      << second[2].ToString();
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 1u);
    EXPECT_EQ(ranks_[r].Mismatch(r, 1), -1);
  }
  // And the failed version's slot is reusable: v3 commits.
  for (const Status& s : SaveAll(3)) EXPECT_TRUE(s.ok()) << s.ToString();
}

// WaitPersist waits for every persist scheduled so far even when a later
// version failed: v1 commits (its persist slowed down), v2 fails to seal;
// WaitPersist reports v2's failure, and only once v1 is complete remotely.
TEST_F(CheckpointerTest, WaitPersistWaitsForThePersistsAfterAFailedVersion) {
  Config c = MakeConfig();
  c.persist_every = 1;
  FaultHooks hooks;
  hooks.at_stage = [](Stage stage, uint64_t version) {
    if (stage == Stage::kPersist && version == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    if (stage == Stage::kSeal && version == 2) return Status::IoError("injected seal failure");
    return Status::Ok();
  };
  const int n = 2;
  Launch(n, c, hooks, /*with_remote=*/true);
  for (const Status& s : SaveAll(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<Status> persisted(n);
  Run([&](int r) {
    ranks_[r].Fill(r, 2);
    EXPECT_TRUE(ranks_[r].ck->Save(2).ok());
    persisted[r] = ranks_[r].ck->WaitPersist();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(persisted[r].message().find("injected seal failure"), std::string::npos)
        << "rank " << r << ": " << persisted[r].ToString();
  }
  DirectoryRemoteStore remote(remote_dir_, c.job);
  EXPECT_EQ(*remote.ListComplete(), std::vector<uint64_t>{1});
}

// A version every rank voted for, whose slot one rank then cannot mark
// committed (its store changed under it: here rank 1's v2 slot is
// invalidated between the seal and the mark), still counts on that rank: the
// persists stay paired across ranks. v2 has no manifest (rank 1 has no sealed
// copy to write), and every later persist succeeds; the relaunch restores the
// newest. Counted only where the mark succeeded, rank 1 persisted v3 and v5
// while rank 0 persisted v2, v4 and v6, and no later version got a manifest.
TEST_F(CheckpointerTest, AVersionOneRankCannotMarkCommittedKeepsThePersistsPaired) {
  Config c = MakeConfig();
  c.persist_every = 2;
  c.persist_keep = 3;
  const int n = 2;
  std::vector<FaultHooks> hooks(n);
  hooks[1].at_stage = [&c](Stage stage, uint64_t version) {
    if (stage != Stage::kCommit || version != 2) return Status::Ok();
    auto store = NodeStore::Attach(StoreId{c.job, NodeIdentity(c, 1), 0});
    if (!store.ok()) return store.status();
    auto slot = store->FindVersion(2);
    if (!slot.has_value()) return Status::Internal("v2 is not sealed on rank 1");
    return store->Invalidate(*slot);
  };
  Launch(n, c, hooks, /*with_remote=*/true);
  for (uint64_t step = 1; step <= 6; ++step) {
    const std::vector<Status> saved = SaveAll(step);
    for (int r = 0; r < n; ++r) {
      if (step == 2 && r == 1) {
        EXPECT_NE(saved[r].message().find("not sealed with version 2"), std::string::npos)
            << saved[r].ToString();
      } else {
        EXPECT_TRUE(saved[r].ok()) << "v" << step << " rank " << r << ": " << saved[r].ToString();
      }
    }
  }
  Run([&](int r) { EXPECT_TRUE(ranks_[r].ck->WaitPersist().ok()) << "rank " << r; });
  {
    DirectoryRemoteStore remote(remote_dir_, c.job);
    auto complete = remote.ListComplete();
    ASSERT_TRUE(complete.ok()) << complete.status().ToString();
    EXPECT_EQ(*complete, (std::vector<uint64_t>{4, 6}));
  }
  ranks_.clear();
  ASSERT_TRUE(CleanJob(c.job).ok());
  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  ExpectRestored(RestoreAll(), 6);
}

// With 2 slots a Save may wait for a persist to free one (v1's persist is
// slowed down: v3 finds v1's slot pinned and v2's committed); the wait is
// logged once as a warning naming the remedy, MEMENTO_SLOTS=3, with which
// the same saves never wait.
TEST_F(CheckpointerTest, ASaveThatWaitsForAPersistSaysSoAndAThirdSlotAvoidsIt) {
  std::mutex mu;
  std::vector<std::pair<LogLevel, std::string>> lines;
  SetLogSink([&](LogLevel level, const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back({level, line});
  });
  struct SinkReset {
    ~SinkReset() { SetLogSink(LogSink()); }
  } reset;
  // v1's persist holds its slot until v3 was saved, or 1.5 s at most (with 2
  // slots v3 cannot be saved before).
  std::atomic<bool> saved_v3{false};
  FaultHooks hooks;
  hooks.at_stage = [&saved_v3](Stage stage, uint64_t version) {
    for (int i = 0; stage == Stage::kPersist && version == 1 && i < 150 && !saved_v3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Status::Ok();
  };
  for (const int slots : {2, 3}) {
    SCOPED_TRACE(slots);
    saved_v3 = false;
    Config c = MakeConfig();
    c.slots = slots;
    c.persist_every = 1;
    Launch(2, c, hooks, /*with_remote=*/true);
    for (uint64_t step = 1; step <= 3; ++step) {
      for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
    }
    saved_v3 = true;
    Run([&](int r) { EXPECT_TRUE(ranks_[r].ck->WaitPersist().ok()); });
    ranks_.clear();
    std::lock_guard<std::mutex> lock(mu);
    int waits = 0;
    for (const auto& [level, line] : lines) {
      if (line.find("waited") == std::string::npos) continue;
      ++waits;
      EXPECT_EQ(level, LogLevel::kWarn) << line;  // once per checkpointer: one per rank
      EXPECT_NE(line.find("v3 waited"), std::string::npos) << line;
      EXPECT_NE(line.find("MEMENTO_SLOTS=3"), std::string::npos) << line;
    }
    EXPECT_EQ(waits, slots == 2 ? 2 : 0);
    lines.clear();
    (void)CleanJob(c.job);
    std::filesystem::remove_all(remote_dir_);
  }
}

// A failed version that the next Save overtook (nobody called Wait in
// between) is still reported, by the next Wait, once: v2 fails to seal, v3
// commits, Wait says why v2 failed, and the Wait after that is OK.
TEST_F(CheckpointerTest, WaitReportsAFailureALaterSaveOvertookOnce) {
  const int n = 2;
  Launch(n, MakeConfig(), FailAt(Stage::kSeal, {2}, "seal"));
  for (const Status& s : SaveAll(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<Status> first(n), second(n);
  Run([&](int r) {
    ranks_[r].Fill(r, 2);
    EXPECT_TRUE(ranks_[r].ck->Save(2).ok());
    ranks_[r].Fill(r, 3);
    EXPECT_TRUE(ranks_[r].ck->Save(3).ok());
    first[r] = ranks_[r].ck->Wait();
    second[r] = ranks_[r].ck->Wait();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(first[r].message().find("injected seal failure"), std::string::npos)
        << "rank " << r << ": " << first[r].ToString();
    EXPECT_TRUE(second[r].ok()) << "rank " << r << ": " << second[r].ToString();
    EXPECT_EQ(ranks_[r].ck->LatestCommitted(), std::optional<uint64_t>(3));
  }
}

// A failed snapshot is reported by WaitSnapshot once, not at every call (the
// optimizer's pre-step hook calls it at every step) until the next Save, and
// not after a Restore that put a committed version back in the buffers.
TEST_F(CheckpointerTest, WaitSnapshotReportsASnapshotFailureOnce) {
  const int n = 2;
  Launch(n, MakeConfig(), FailAt(Stage::kSnapshot, {2, 3}, "snapshot"));
  for (const Status& s : SaveAll(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<Status> first(n), again(n), after_restore(n), third(n), third_again(n);
  std::vector<Result<RestoreReport>> restored(n, Status::Internal("not run"));
  Run([&](int r) {
    ranks_[r].Fill(r, 2);
    (void)ranks_[r].ck->Save(2);
    first[r] = ranks_[r].ck->WaitSnapshot();
    again[r] = ranks_[r].ck->WaitSnapshot();
    (void)ranks_[r].ck->Wait();
    restored[r] = ranks_[r].ck->Restore();
    after_restore[r] = ranks_[r].ck->WaitSnapshot();
    ranks_[r].Fill(r, 3);
    (void)ranks_[r].ck->Save(3);
    third[r] = ranks_[r].ck->WaitSnapshot();  // the next version's failure is its own
    third_again[r] = ranks_[r].ck->WaitSnapshot();
    (void)ranks_[r].ck->Wait();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(first[r].message().find("injected snapshot failure"), std::string::npos)
        << "rank " << r << ": " << first[r].ToString();
    EXPECT_TRUE(again[r].ok()) << "rank " << r << ": " << again[r].ToString();
    ASSERT_TRUE(restored[r].ok()) << restored[r].status().ToString();
    EXPECT_EQ(restored[r]->version, 1u);
    EXPECT_TRUE(after_restore[r].ok()) << "rank " << r << ": " << after_restore[r].ToString();
    EXPECT_NE(third[r].message().find("v3"), std::string::npos)
        << "rank " << r << ": " << third[r].ToString();
    EXPECT_TRUE(third_again[r].ok()) << "rank " << r << ": " << third_again[r].ToString();
  }
}

// A Checkpointer that continues a run (ContinueRun: the torch adapter's
// re-registration) does not know which slot holds the committed version; its
// next Save must still not write over it. A version whose commit failed is
// invalidated, so that Save takes that slot (were it left sealed, the
// committed version would be the oldest and taken), and when it fails too the
// committed version is restored.
TEST_F(CheckpointerTest, AContinuedRunKeepsItsCommittedSlotFromTheNextSave) {
  const int n = 2;
  Launch(n, MakeConfig(), FailAt(Stage::kCommit, {6}, "commit"));
  for (const Status& s : SaveAll(5)) ASSERT_TRUE(s.ok()) << s.ToString();
  for (const Status& s : SaveAll(6)) ASSERT_FALSE(s.ok());
  std::vector<RunPosition> positions;
  for (int r = 0; r < n; ++r) positions.push_back(ranks_[r].ck->Position());
  ASSERT_EQ(positions[0].latest, std::optional<uint64_t>(5));
  Launch(n, MakeConfig(), FailAt(Stage::kSnapshot, {7}, "snapshot"));
  Run([&](int r) {
    ranks_[r].ck->ContinueRun(positions[r]);
    ranks_[r].Fill(r, 7);
    (void)ranks_[r].ck->Save(7);
    EXPECT_FALSE(ranks_[r].ck->Wait().ok());
  });
  Launch(n, MakeConfig());
  ExpectRestored(RestoreAll(), 5);
}

// An engine that continues a run and is replaced before its first Save (the
// adapter re-registers at every save whose tensors moved, and that save may
// fail before the engine's: extra state over its capacity) hands the same run
// on: its latest version, the step order and the lineage a restore after a
// crash in the next engine's first Save looks for.
TEST_F(CheckpointerTest, AContinuedRunReplacedBeforeItsFirstSaveHandsTheRunOn) {
  const int n = 2;
  Launch(n, MakeConfig());
  for (uint64_t step : {1, 2, 3}) {
    for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::vector<RunPosition> positions;
  for (int r = 0; r < n; ++r) positions.push_back(ranks_[r].ck->Position());
  Launch(n, MakeConfig());  // replaced, no Save
  for (int r = 0; r < n; ++r) {
    ranks_[r].ck->ContinueRun(positions[r]);
    EXPECT_EQ(ranks_[r].ck->LatestCommitted(), std::optional<uint64_t>(3));
    EXPECT_EQ(ranks_[r].ck->Position().lineage, positions[r].lineage);
    positions[r] = ranks_[r].ck->Position();
  }
  Launch(n, MakeConfig(), FailAt(Stage::kSnapshot, {4}, "snapshot"));  // and again
  Run([&](int r) {
    ranks_[r].ck->ContinueRun(positions[r]);
    EXPECT_EQ(ranks_[r].ck->Save(3).code(), StatusCode::kInvalidArgument) << "rank " << r;
    ranks_[r].Fill(r, 4);
    (void)ranks_[r].ck->Save(4);
    EXPECT_FALSE(ranks_[r].ck->Wait().ok());
  });
  Launch(n, MakeConfig());
  ExpectRestored(RestoreAll(), 3);
}

TEST_F(CheckpointerTest, DeadRankDuringSnapshotLeavesPreviousVersion) {
  const int n = 3;
  Launch(n, MakeConfig());
  for (const Status& s : SaveAll(5)) ASSERT_TRUE(s.ok()) << s.ToString();
  // v6: rank 1 "crashes" before its snapshot (it never saves).
  std::vector<Status> waits(n);
  Run([&](int r) {
    if (r == 1) {
      group_->Kill(1);
      return;
    }
    ranks_[r].Fill(r, 6);
    ASSERT_TRUE(ranks_[r].ck->Save(6).ok());
    waits[r] = ranks_[r].ck->Wait();
  });
  EXPECT_EQ(waits[0].code(), StatusCode::kUnavailable) << waits[0].ToString();
  EXPECT_EQ(waits[2].code(), StatusCode::kUnavailable) << waits[2].ToString();
  EXPECT_EQ(ranks_[0].ck->LatestCommitted(), std::optional<uint64_t>(5));
  Launch(n, MakeConfig());
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 5u) << reports[r]->ToString();
    EXPECT_EQ(ranks_[r].Mismatch(r, 5), -1);
  }
}

// After a commit collective failed the transport is unusable: the next Save
// and WaitSnapshot say so (naming the failed commit) instead of returning OK
// for versions that can never commit.
TEST_F(CheckpointerTest, BrokenCheckpointerSaysSoAtTheNextSave) {
  const int n = 3;
  Launch(n, MakeConfig());
  for (const Status& s : SaveAll(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  group_->Kill(2);
  std::vector<Status> waits(n), next_saves(n), snapshots(n);
  Run([&](int r) {
    if (r == 2) return;
    ranks_[r].Fill(r, 2);
    ASSERT_TRUE(ranks_[r].ck->Save(2).ok());
    waits[r] = ranks_[r].ck->Wait();
    next_saves[r] = ranks_[r].ck->Save(3);
    snapshots[r] = ranks_[r].ck->WaitSnapshot();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(waits[r].ok()) << "rank " << r;
    EXPECT_EQ(next_saves[r].code(), StatusCode::kUnavailable) << next_saves[r].ToString();
    EXPECT_NE(next_saves[r].message().find("checkpointing stopped"), std::string::npos)
        << next_saves[r].ToString();
    EXPECT_NE(next_saves[r].message().find("commit of v2"), std::string::npos)
        << next_saves[r].ToString();
    EXPECT_FALSE(snapshots[r].ok()) << "rank " << r;
    EXPECT_EQ(ranks_[r].ck->LatestCommitted(), std::optional<uint64_t>(1));
  }
}

TEST_F(CheckpointerTest, SaveWhileInFlightWaitsForTheCommit) {
  const int n = 2;
  std::atomic<bool> v1_committed{false};
  ranks_.clear();
  group_ = InProcessGroup::Create(n, std::chrono::seconds(20));
  ranks_.resize(n);
  for (int r = 0; r < n; ++r) {
    FaultHooks h;
    h.at_stage = [&v1_committed](Stage stage, uint64_t version) {
      if (stage == Stage::kCommit && version == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      if (stage == Stage::kCommitted && version == 1) v1_committed = true;
      return Status::Ok();
    };
    auto ck = Checkpointer::Create(MakeConfig(), group_->transport(r), nullptr, h);
    ASSERT_TRUE(ck.ok());
    ranks_[r].ck = std::move(ck).value();
    ranks_[r].bufs.emplace_back(30000);
    ASSERT_TRUE(ranks_[r].ck->RegisterBuffer("w", ranks_[r].bufs[0].data(), 30000).ok());
  }
  std::vector<Status> waits(n);
  Run([&](int r) {
    ranks_[r].Fill(r, 1);
    ASSERT_TRUE(ranks_[r].ck->Save(1).ok());
    ASSERT_TRUE(ranks_[r].ck->WaitSnapshot().ok());
    ranks_[r].Fill(r, 2);
    ASSERT_TRUE(ranks_[r].ck->Save(2).ok());  // v1 still committing: waits for it
    EXPECT_TRUE(v1_committed.load());
    EXPECT_GE(ranks_[r].ck->LatestCommitted().value_or(0), 1u);
    waits[r] = ranks_[r].ck->Wait();
  });
  for (const Status& s : waits) ASSERT_TRUE(s.ok()) << s.ToString();
  for (auto& r : ranks_) EXPECT_EQ(r.ck->LatestCommitted(), std::optional<uint64_t>(2));
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok());
    EXPECT_EQ(reports[r]->version, 2u);
    EXPECT_EQ(ranks_[r].Mismatch(r, 2), -1);
  }
}

TEST_F(CheckpointerTest, StepsMustIncreaseAndLayoutIsFixed) {
  Launch(1, MakeConfig());
  for (const Status& s : SaveAll(7)) ASSERT_TRUE(s.ok());
  Status again = ranks_[0].ck->Save(7);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument) << again.ToString();
  EXPECT_NE(again.message().find("version + 1"), std::string::npos) << again.ToString();
  uint8_t extra[4];
  EXPECT_EQ(ranks_[0].ck->RegisterBuffer("late", extra, 4).code(), StatusCode::kFailedPrecondition);
}

// With an interval, a call the schedule would skip is still refused when its
// step is not above the latest committed version (as after a Restore that
// resumes at the restored version instead of the one after it), and it does
// not count as a skipped call.
TEST_F(CheckpointerTest, AStepNotAboveTheLatestIsRefusedEvenWhenItWouldBeSkipped) {
  Config c = MakeConfig();
  c.interval = 2;
  Launch(1, c);
  for (const Status& s : SaveAll(4)) ASSERT_TRUE(s.ok()) << s.ToString();
  const auto before = ranks_[0].ck->Interval();
  Status skipped_step = ranks_[0].ck->Save(3);
  EXPECT_EQ(skipped_step.code(), StatusCode::kInvalidArgument) << skipped_step.ToString();
  EXPECT_EQ(ranks_[0].ck->Interval().skipped, before.skipped);
  EXPECT_TRUE(ranks_[0].ck->Save(5).ok());  // skipped by the interval
  EXPECT_EQ(ranks_[0].ck->Interval().skipped, before.skipped + 1);
}

TEST_F(CheckpointerTest, NothingToRestoreIsNotFound) {
  Launch(3, MakeConfig());
  auto reports = RestoreAll();
  for (const auto& r : reports) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_NE(r.status().message().find("nothing to restore"), std::string::npos);
  }
}

// A job that committed versions and lost them (no scheme, no remote, one of
// two nodes lost) fails its restore as Unrecoverable on every rank: only a
// run that never committed one gets NotFound, which a job takes for a fresh
// start.
TEST_F(CheckpointerTest, LostCommittedVersionsAreUnrecoverableNotNothing) {
  const Config c = MakeConfig();
  Launch(2, c);
  for (uint64_t step = 1; step <= 2; ++step) {
    for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ranks_.clear();
  ASSERT_TRUE(NodeStore::Destroy({job_, NodeIdentity(c, 1), 0}).ok());
  Launch(2, c);
  auto reports = RestoreAll();
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(reports[r].ok()) << "rank " << r << ": " << reports[r]->ToString();
    EXPECT_EQ(reports[r].status().code(), StatusCode::kUnrecoverable)
        << "rank " << r << ": " << reports[r].status().ToString();
    EXPECT_NE(reports[r].status().message().find("no committed version can be restored"),
              std::string::npos)
        << reports[r].status().ToString();
  }
}

// Ranks whose settings shape the protocol differently (here the chunk size,
// which decides how many protect messages a holder takes) are refused at
// once on every rank, by name, instead of leaving their peers waiting.
TEST_F(CheckpointerTest, RanksWithDifferentProtocolSettingsAreRefusedByName) {
  Config c = MakeConfig();
  c.scheme = "replica:2";
  group_ = InProcessGroup::Create(2, std::chrono::seconds(20));
  std::vector<std::vector<uint8_t>> bufs(2, std::vector<uint8_t>(100000, 1));  // outlive cks
  std::vector<std::unique_ptr<Checkpointer>> cks;
  for (int r = 0; r < 2; ++r) {
    Config mine = c;
    if (r == 1) mine.chunk_bytes = 8192;
    auto ck = Checkpointer::Create(mine, group_->transport(r));
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    ASSERT_TRUE((*ck)->RegisterBuffer("e", bufs[r].data(), bufs[r].size()).ok());
    cks.push_back(std::move(ck).value());
  }
  std::vector<Status> saved(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { saved[r] = cks[r]->Save(1); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(saved[r].code(), StatusCode::kInvalidArgument) << saved[r].ToString();
    EXPECT_NE(saved[r].message().find("MEMENTO_CHUNK_BYTES differs between ranks: rank 0 has "
                                      "'4096', rank 1 has '8192'"),
              std::string::npos)
        << saved[r].ToString();
  }
}

// A node identity too long for the store names, made so by the virtual node
// suffix after MEMENTO_NODE passed its own check, is refused by the settings
// that made it, on every rank.
TEST_F(CheckpointerTest, ATooLongNodeIdentityNamesItsSettings) {
  Config c = MakeConfig();
  c.node = std::string(199, 'n');
  ASSERT_TRUE(c.Validate().ok());
  Launch(2, c);
  for (const Status& s : SaveAll(1)) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("MEMENTO_NODE (or the host name) plus the '/<virtual node>' that "
                               "MEMENTO_RANKS_PER_NODE appends"),
              std::string::npos)
        << s.ToString();
  }
}

TEST_F(CheckpointerTest, CorruptLocalCopyFallsBackToOlderVersion) {
  Launch(2, MakeConfig());
  for (uint64_t step : {1, 2}) {
    for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok());
  }
  ranks_.clear();
  // Flip one payload byte of v2 on rank 1's node.
  Config c = MakeConfig();
  StoreId id{c.job, NodeIdentity(c, 1), 0};
  {
    auto store = NodeStore::Attach(id);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto slot = store->FindVersion(2);
    ASSERT_TRUE(slot.has_value());
    auto view = store->ReadRegion(*slot, 0);
    ASSERT_TRUE(view.ok());
    const_cast<uint8_t*>(view->data)[123] ^= 0x10;
  }
  Launch(2, MakeConfig());
  auto reports = RestoreAll();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 1u) << reports[r]->ToString();
    EXPECT_EQ(ranks_[r].Mismatch(r, 1), -1);
  }
}

TEST_F(CheckpointerTest, PersistThenRestoreFromRemoteAfterAllSegmentsUnlinked) {
  Config c = MakeConfig();
  c.persist_every = 2;  // as TrainPersisted, for the relaunch below
  c.persist_keep = 2;
  const int n = 3;
  TrainPersisted(c, n, 7);
  if (HasFatalFailure()) return;
  {
    DirectoryRemoteStore remote(remote_dir_, c.job);
    auto complete = remote.ListComplete();
    ASSERT_TRUE(complete.ok()) << complete.status().ToString();
    EXPECT_EQ(*complete, (std::vector<uint64_t>{4, 6}));  // every 2nd commit, keep 2
  }
  ranks_.clear();
  auto removed = CleanJob(c.job);  // every node lost
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->size(), static_cast<size_t>(n));
  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 6u);
    for (const auto& e : reports[r]->entries) EXPECT_EQ(e.source, RestoreSource::kRemote);
    EXPECT_EQ(ranks_[r].Mismatch(r, 6), -1);
    EXPECT_EQ(ranks_[r].ck->LatestCommitted(), std::optional<uint64_t>(6));
  }
  // The restored version was re-seeded in memory: a crash now restores from memory.
  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok());
    EXPECT_EQ(reports[r]->version, 6u);
    EXPECT_EQ(reports[r]->entries[0].source, RestoreSource::kLocalMemory);
  }
}

// Jobs of `ids.size()` ranks, rank r on node "vn/<ids[r]>" with a remote
// tier (persist every 2nd commit), each registering one entry "w": slice
// slices[r] of a global [n * 50000] uint8 tensor, filled with that slice's
// pattern.
class RemotePlaceTest : public CheckpointerTest {
 protected:
  Config Base() const {
    Config c = MakeConfig();
    c.ranks_per_node = 0;
    c.persist_every = 2;
    c.persist_keep = 2;
    return c;
  }
  void LaunchNodes(const std::vector<int>& ids, const std::vector<int>& slices) {
    const int n = static_cast<int>(ids.size());
    ranks_.clear();
    slices_ = slices;
    group_ = InProcessGroup::Create(n, std::chrono::seconds(20));
    ranks_.resize(n);
    for (int r = 0; r < n; ++r) {
      Config rc = Base();
      rc.node = "vn/" + std::to_string(ids[r]);
      auto ck = Checkpointer::Create(rc, group_->transport(r),
                                     std::make_shared<DirectoryRemoteStore>(remote_dir_, rc.job));
      ASSERT_TRUE(ck.ok()) << ck.status().ToString();
      ranks_[r].ck = std::move(ck).value();
      ranks_[r].bufs.assign(1, std::vector<uint8_t>(kSlice));
      const EntryLayout layout{"uint8", {n * kSlice}, {kSlice}, {slices[r] * kSlice}};
      ASSERT_TRUE(ranks_[r].ck->RegisterBuffer("w", ranks_[r].bufs[0].data(), kSlice, layout).ok());
    }
  }
  // Saves versions 1..steps on every rank and waits for their persists.
  void SaveSteps(uint64_t steps) {
    for (uint64_t step = 1; step <= steps; ++step) {
      Run([&](int r) {
        ranks_[r].Fill(slices_[r], step);
        ASSERT_TRUE(ranks_[r].ck->Save(step).ok());
        ASSERT_TRUE(ranks_[r].ck->Wait().ok());
      });
    }
    Run([&](int r) { EXPECT_TRUE(ranks_[r].ck->WaitPersist().ok()); });
  }
  static constexpr int64_t kSlice = 50000;
  std::vector<int> slices_;
};

// Rank files follow the node, not the world rank: 3 nodes (vn/0..2, one rank
// each, slices of equal sizes, each node keeping its slice) persist v2 and
// v4; vn/1 is lost, and the relaunch hands out the ranks in another order
// (world rank 1 on vn/2, rank 2 on vn/1, as a hostfile with the replacement
// appended or a new rendezvous does). vn/1 must get its own bytes back from
// the remote tier, not the file of whichever node had its world rank before.
TEST_F(RemotePlaceTest, ARelaunchInAnotherRankOrderReadsEachNodesOwnRemoteFile) {
  LaunchNodes({0, 1, 2}, {0, 1, 2});
  if (HasFatalFailure()) return;
  SaveSteps(4);
  ranks_.clear();
  ASSERT_TRUE(NodeStore::Destroy({Base().job, "vn/1", 0}).ok());
  LaunchNodes({0, 2, 1}, {0, 2, 1});
  if (HasFatalFailure()) return;
  auto reports = RestoreAll();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 4u);
    EXPECT_EQ(ranks_[r].Mismatch(slices_[r], 4), -1)
        << "rank " << r << " (slice " << slices_[r] << ") got another node's bytes";
  }
  EXPECT_EQ(reports[2]->entries[0].source, RestoreSource::kRemote) << reports[2]->ToString();
}

// Every node's memory is lost and the relaunch cuts the tensor the other way
// round (rank 0 registers slice 1, rank 1 slice 0): a rank file is never
// read into a slice other than the one it was written from, though names
// and sizes agree; the restore fails naming the entry and both slices.
TEST_F(RemotePlaceTest, ARemoteSliceIsNeverReadIntoAnotherSlice) {
  LaunchNodes({0, 1}, {0, 1});
  if (HasFatalFailure()) return;
  SaveSteps(2);
  ranks_.clear();
  ASSERT_TRUE(CleanJob(Base().job).ok());
  LaunchNodes({0, 1}, {1, 0});
  if (HasFatalFailure()) return;
  auto reports = RestoreAll();
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(reports[r].ok()) << "rank " << r << " restored " << reports[r]->ToString();
    EXPECT_NE(reports[r].status().message().find("entry 'w' of rank file"), std::string::npos)
        << reports[r].status().ToString();
    EXPECT_NE(reports[r].status().message().find("this rank registered uint8 [50000] at"),
              std::string::npos)
        << reports[r].status().ToString();
  }
}

// Every node's memory is lost and the job comes back on fewer ranks without
// MEMENTO_ELASTIC: the remote version of the old rank count cannot be read
// as it is, and the restore says so (ElasticRestoreNeeded, naming the
// setting) instead of Unrecoverable.
TEST_F(CheckpointerTest, ARemoteVersionOfAnotherRankCountNeedsTheElasticRestore) {
  Config c = MakeConfig();
  c.persist_every = 2;
  c.persist_keep = 2;
  TrainPersisted(c, 3, 4);
  if (HasFatalFailure()) return;
  ranks_.clear();
  ASSERT_TRUE(CleanJob(c.job).ok());
  Launch(2, c, FaultHooks(), /*with_remote=*/true);
  auto reports = RestoreAll();
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(reports[r].ok()) << reports[r]->ToString();
    EXPECT_EQ(reports[r].status().code(), StatusCode::kElasticRestoreNeeded)
        << reports[r].status().ToString();
    EXPECT_NE(reports[r].status().message().find("MEMENTO_ELASTIC=1"), std::string::npos)
        << reports[r].status().ToString();
  }
}

TEST_F(CheckpointerTest, PersistNeverOverwritesTheSlotItReads) {
  // persist_every = 1 with 2 slots: Save(v+2) must wait for v's persist.
  Config c = MakeConfig();
  c.persist_every = 1;
  const int n = 2;
  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  for (uint64_t step = 1; step <= 6; ++step) {
    for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  Run([&](int r) { EXPECT_TRUE(ranks_[r].ck->WaitPersist().ok()); });
  DirectoryRemoteStore remote(remote_dir_, c.job);
  auto complete = remote.ListComplete();
  ASSERT_TRUE(complete.ok());
  EXPECT_EQ(*complete, (std::vector<uint64_t>{5, 6}));
  std::vector<std::vector<uint8_t>> back(1);
  back[0].resize(kEntryBytes[0] + 1);
  ASSERT_TRUE(remote.ReadRankFile(5, 1, {{"e0", back[0].data(), back[0].size()}}).ok());
  for (size_t i = 0; i < back[0].size(); ++i) ASSERT_EQ(back[0][i], Pattern(1, 5, 0, i));
}

// The stores follow the environment's MEMENTO_SHM_DIR: a configuration that
// names another directory is refused by Create, naming the variable, instead
// of being ignored; the same directory, however spelt, is accepted.
TEST(CheckpointerCreateTest, ShmDirOtherThanTheEnvironmentsIsRefused) {
  ASSERT_EQ(unsetenv("MEMENTO_SHM_DIR"), 0);
  const std::string other = "/dev/shm/memento-tck-" + testing::ProcessTag();
  ASSERT_EQ(mkdir(other.c_str(), 0700), 0);
  auto group = InProcessGroup::Create(1);
  Config c;
  c.job = "ck-shm-dir";
  for (const std::string& dir : {other, std::string("/nonexistent-tmpfs")}) {
    c.shm_dir = dir;
    auto ck = Checkpointer::Create(c, group->transport(0));
    ASSERT_FALSE(ck.ok()) << dir;
    EXPECT_EQ(ck.status().code(), StatusCode::kInvalidArgument) << ck.status().ToString();
    EXPECT_NE(ck.status().message().find("MEMENTO_SHM_DIR='" + dir + "'"), std::string::npos)
        << ck.status().ToString();
    EXPECT_NE(ck.status().message().find("/dev/shm"), std::string::npos) << ck.status().ToString();
  }
  c.shm_dir = "/dev/shm/";  // the environment's default, with a trailing '/'
  EXPECT_TRUE(Checkpointer::Create(c, group->transport(0)).ok());
  ASSERT_EQ(setenv("MEMENTO_SHM_DIR", other.c_str(), 1), 0);
  c.shm_dir = other;
  auto same = Checkpointer::Create(c, group->transport(0));
  EXPECT_TRUE(same.ok()) << same.status().ToString();
  ASSERT_EQ(unsetenv("MEMENTO_SHM_DIR"), 0);
  ASSERT_EQ(rmdir(other.c_str()), 0);
}

}  // namespace
}  // namespace memento::runtime
