// The remote tier as a restore source (label local): every complete remote
// version is a candidate, newest first, and one that fails its crc checks on
// any rank gives way to the next one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/checkpointer_fixture.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/store_admin.h"

namespace memento::runtime {
namespace {

using testing::CheckpointerTest;

// Flips one byte of `path` at `offset`.
void FlipByte(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  ASSERT_TRUE(f.good()) << path;
  c ^= 0x20;
  f.seekp(offset);
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << path;
}

using RemoteFallbackTest = CheckpointerTest;

// Versions 4 and 6 on remote (persist every 2nd, keep 2), every node lost,
// one byte of rank 1's v6 file flipped (inside a payload: size, manifest and
// headers still look fine, so v6 is listed complete). Every rank restores v4,
// bit-exact, and the report says why v6 was passed over.
TEST_F(RemoteFallbackTest, CorruptNewestRemoteVersionRestoresTheOlderOne) {
  Config c = MakeConfig();
  c.persist_every = 2;  // as TrainPersisted, for the relaunch below
  c.persist_keep = 2;
  const int n = 3;
  TrainPersisted(c, n, 7);
  if (HasFatalFailure()) return;
  ranks_.clear();
  DirectoryRemoteStore remote(remote_dir_, c.job);
  ASSERT_EQ(*remote.ListComplete(), (std::vector<uint64_t>{4, 6}));
  FlipByte(*remote.RankFileOf(6, 1), 5000);
  ASSERT_EQ(*remote.ListComplete(), (std::vector<uint64_t>{4, 6}));  // still looks complete
  ASSERT_TRUE(CleanJob(c.job).ok());  // every node lost

  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 4u) << reports[r]->ToString();
    for (const auto& e : reports[r]->entries) EXPECT_EQ(e.source, RestoreSource::kRemote);
    EXPECT_EQ(ranks_[r].Mismatch(r, 4), -1) << "rank " << r;
    std::string notes;
    for (const auto& note : reports[r]->notes) notes += note + "\n";
    EXPECT_NE(notes.find("v6"), std::string::npos) << notes;
  }
}

// The same when memory still holds a version older than remote's newest: the
// corrupt v6 on remote gives way to the newest version that can be rebuilt,
// which is v5 in memory (nodes kept) over v4 on remote.
TEST_F(RemoteFallbackTest, CorruptRemoteVersionGivesWayToMemory) {
  Config c = MakeConfig();
  c.persist_every = 2;
  c.persist_keep = 2;
  const int n = 2;
  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  for (uint64_t step = 1; step <= 6; ++step) {
    for (const Status& s : SaveAll(step)) ASSERT_TRUE(s.ok()) << s.ToString();
  }
  Run([&](int r) { EXPECT_TRUE(ranks_[r].ck->WaitPersist().ok()); });
  ranks_.clear();
  DirectoryRemoteStore remote(remote_dir_, c.job);
  ASSERT_EQ(*remote.ListComplete(), (std::vector<uint64_t>{4, 6}));
  FlipByte(*remote.RankFileOf(6, 0), 5000);
  // Rank 0's v6 in memory is gone too (its slot invalidated): memory cannot
  // serve v6, remote's v6 is corrupt; memory's v5 is the newest intact one.
  {
    StoreId id{c.job, NodeIdentity(c, 0), 0};
    auto store = NodeStore::Attach(id);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto slot = store->FindVersion(6);
    ASSERT_TRUE(slot.has_value());
    ASSERT_TRUE(store->Invalidate(*slot).ok());
  }
  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(reports[r].ok()) << "rank " << r << ": " << reports[r].status().ToString();
    EXPECT_EQ(reports[r]->version, 5u) << reports[r]->ToString();
    EXPECT_EQ(ranks_[r].Mismatch(r, 5), -1) << "rank " << r;
  }
}

// A relaunch whose rank 1 reads another directory as the remote tier (a
// relative MEMENTO_REMOTE resolved elsewhere, a mount missing on its node, a
// listing that failed there). While memory holds a newer version than the
// remote's newest, that version is restored. With every node's memory lost,
// the restore fails on every rank, naming the version rank 1 does not see,
// instead of starting afresh (whose persists would then prune the run's
// versions away); a relaunch that reads the right directory restores it.
TEST_F(RemoteFallbackTest, RanksThatSeeAnotherRemoteTierRefuseAFreshStart) {
  Config c = MakeConfig();
  c.persist_every = 2;
  c.persist_keep = 2;
  const int n = 3;
  TrainPersisted(c, n, 7);
  if (HasFatalFailure()) return;
  ranks_.clear();
  const std::filesystem::path elsewhere = remote_dir_.string() + "-elsewhere";
  std::filesystem::create_directories(elsewhere);
  remote_dir_of_rank_[1] = elsewhere;

  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  ExpectRestored(RestoreAll(), 7);  // memory: v7, newer than the disputed v6
  ranks_.clear();

  ASSERT_TRUE(CleanJob(c.job).ok());  // every node lost
  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  auto reports = RestoreAll();
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(reports[r].ok()) << "rank " << r << " restored " << reports[r]->ToString();
    EXPECT_EQ(reports[r].status().code(), StatusCode::kUnavailable)
        << reports[r].status().ToString();
    EXPECT_NE(reports[r].status().message().find(
                  "remote version 6 is complete for rank(s) 0, 2 but not seen by rank(s) 1"),
              std::string::npos)
        << reports[r].status().ToString();
  }
  ranks_.clear();
  remote_dir_of_rank_.clear();
  std::filesystem::remove_all(elsewhere);
  Launch(n, c, FaultHooks(), /*with_remote=*/true);
  ExpectRestored(RestoreAll(), 6);
}

// Config::remote_dir is checked when the Checkpointer is made, not at the
// first persist.
TEST(RemoteTierAtCreateTest, UnusableRemoteDirectoryIsRefusedByCreate) {
  Config c;
  c.job = "rft-create";
  c.remote_dir = "/dev/null";
  auto group = InProcessGroup::Create(1);
  auto ck = Checkpointer::Create(c, group->transport(0));
  ASSERT_FALSE(ck.ok());
  EXPECT_EQ(ck.status().code(), StatusCode::kInvalidArgument) << ck.status().ToString();
  EXPECT_NE(ck.status().message().find("/dev/null"), std::string::npos);
}

}  // namespace
}  // namespace memento::runtime
