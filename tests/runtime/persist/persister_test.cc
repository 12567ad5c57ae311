// Persister on its own, ranks as threads over the in-process transport, real
// node stores and a directory remote tier: a committed version becomes a
// complete remote version; its slot stays pinned until its rank file is
// written; one rank failing means no manifest at all.
#include "persist/persister.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <thread>

#include "memento/erasure/crc32c.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/inprocess_transport.h"
#include "store/store_test_util.h"

namespace memento::runtime {
namespace {

constexpr uint64_t kBytes = 4096;

class PersisterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/memento-persister-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A store of rank r holding `version` sealed in slot 0.
  NodeStore SealedStore(int r, uint64_t version) {
    StoreLayout layout;
    RegionSpec spec;
    spec.name = "w";
    spec.capacity = kBytes;
    layout.regions.push_back(spec);
    auto store = NodeStore::Create({cleaner_.job(), "node-" + std::to_string(r), 0}, layout, 2);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_TRUE(store->BeginWriteSlot(0, version).ok());
    uint8_t* p = store->MutableRegion(0, 0);
    for (uint64_t i = 0; i < kBytes; ++i) p[i] = static_cast<uint8_t>(r + i);
    EXPECT_TRUE(store->SealRegion(0, 0, kBytes, erasure::Crc32c(p, kBytes)).ok());
    EXPECT_TRUE(store->SealSlot(0, version).ok());
    return std::move(store).value();
  }

  // Persists `version` on `n` ranks; `hook` runs on every rank's persist thread.
  using RankHook = std::function<Status(int rank, Stage, uint64_t)>;
  std::vector<Status> PersistOnThreads(int n, uint64_t version, const RankHook& hook,
                                       std::vector<int>* pins_at_persist) {
    auto group = InProcessGroup::Create(n, timeout_);
    std::vector<Status> out(n);
    pins_at_persist->assign(n, -1);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        NodeStore store = SealedStore(r, version);
        if (r == damaged_rank_) {  // a byte changes in memory after the seal
          const_cast<uint8_t*>(store.ReadRegion(0, 0)->data)[100] ^= 0x10;
        }
        SlotAllocator slots(&store);
        slots.SetCommitted(0);
        std::shared_ptr<RemoteStore> remote =
            make_remote_ ? make_remote_()
                         : std::make_shared<DirectoryRemoteStore>(dir_, cleaner_.job());
        StageHook rank_hook = [&, r](Stage s, uint64_t v) -> Status {
          if (s == Stage::kPersist) (*pins_at_persist)[r] = slots.pins(0);
          return hook ? hook(r, s, v) : Status::Ok();
        };
        {
          Persister persister(remote, group->transport(r), &store, &slots, {"w"},
                              {EntryLayout()}, /*keep=*/2, rank_hook);
          persister.Enqueue(version, 0);
          out[r] = persister.WaitIdle();
        }
        EXPECT_EQ(slots.pins(0), 0);  // released once the rank file is written
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  std::function<std::shared_ptr<RemoteStore>()> make_remote_;  // default: a directory store
  int damaged_rank_ = -1;  // whose slot has a byte changed after it was sealed
  std::chrono::milliseconds timeout_{20000};  // the transport's
  testing::JobCleaner cleaner_{testing::UniqueJob("persister")};
  std::string dir_;
};

TEST_F(PersisterTest, ACommittedVersionBecomesCompleteRemotely) {
  std::vector<int> pins;
  auto out = PersistOnThreads(3, 7, nullptr, &pins);
  for (const Status& s : out) EXPECT_TRUE(s.ok()) << s.ToString();
  for (int p : pins) EXPECT_EQ(p, 1);  // the slot was pinned while it was read
  DirectoryRemoteStore remote(dir_, cleaner_.job());
  auto complete = remote.ListComplete();
  ASSERT_TRUE(complete.ok());
  EXPECT_EQ(*complete, std::vector<uint64_t>{7});
  auto manifest = remote.ReadManifest(7);
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(manifest->world_size, 3);
}

TEST_F(PersisterTest, ARankThatFailsToWriteMeansNoManifest) {
  std::vector<int> pins;
  auto out = PersistOnThreads(
      3, 9,
      [](int rank, Stage s, uint64_t) {
        return rank == 2 && s == Stage::kPersist ? Status::IoError("disk full") : Status::Ok();
      },
      &pins);
  EXPECT_FALSE(out[0].ok());  // rank 0 writes no manifest and says why
  EXPECT_NE(out[0].message().find("rank 2"), std::string::npos) << out[0].ToString();
  EXPECT_FALSE(out[2].ok());
  DirectoryRemoteStore remote(dir_, cleaner_.job());
  auto complete = remote.ListComplete();
  ASSERT_TRUE(complete.ok());
  EXPECT_TRUE(complete->empty());
  // The files ranks 0 and 1 wrote go with the failed persist: on a full disk
  // they would fail the next persists too (the stale rule took an hour).
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir_)) {
    EXPECT_EQ(f.path().filename().string().rfind("rank-", 0), std::string::npos)
        << "left behind: " << f.path();
  }
  EXPECT_FALSE(std::filesystem::exists(remote.VersionDir(9)));
}

// A byte of rank 1's slot changed after it was sealed (memory damaged
// between commit and persist): rank 1 refuses to persist it, naming the
// entry, writes no rank file, and rank 0 writes no manifest.
TEST_F(PersisterTest, ASlotDamagedSinceItsSealIsNotPersisted) {
  damaged_rank_ = 1;
  std::vector<int> pins;
  auto out = PersistOnThreads(3, 5, nullptr, &pins);
  EXPECT_EQ(out[1].code(), StatusCode::kCorruption) << out[1].ToString();
  EXPECT_NE(out[1].message().find("entry 'w' of v5 fails its sealed crc32c"), std::string::npos)
      << out[1].ToString();
  EXPECT_FALSE(out[0].ok());
  EXPECT_NE(out[0].message().find("rank 1"), std::string::npos) << out[0].ToString();
  DirectoryRemoteStore remote(dir_, cleaner_.job());
  auto complete = remote.ListComplete();
  ASSERT_TRUE(complete.ok());
  EXPECT_TRUE(complete->empty());
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir_)) {
    EXPECT_EQ(f.path().filename().string().find("rank-000001"), std::string::npos)
        << "rank 1 left " << f.path();
  }
}

// Rank 2's file takes 4 times the transport's timeout to write: rank 0 waits
// for it (the rank sends "still writing" records meanwhile) and the version
// is persisted, instead of rank 0's wait timing out.
TEST_F(PersisterTest, ARankFileSlowerThanTheTimeoutIsWaitedFor) {
  timeout_ = std::chrono::milliseconds(300);
  std::vector<int> pins;
  auto out = PersistOnThreads(
      3, 8,
      [](int rank, Stage s, uint64_t) {
        if (rank == 2 && s == Stage::kPersist) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1200));
        }
        return Status::Ok();
      },
      &pins);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(out[r].ok()) << "rank " << r << ": " << out[r].ToString();
  DirectoryRemoteStore remote(dir_, cleaner_.job());
  auto complete = remote.ListComplete();
  ASSERT_TRUE(complete.ok());
  EXPECT_EQ(*complete, std::vector<uint64_t>{8});
}

TEST_F(PersisterTest, AFailingManifestHookLeavesTheVersionInvisible) {
  std::vector<int> pins;
  auto out = PersistOnThreads(
      2, 4,
      [](int, Stage s, uint64_t) {
        return s == Stage::kManifest ? Status::Unavailable("injected") : Status::Ok();
      },
      &pins);
  EXPECT_EQ(out[0].code(), StatusCode::kUnavailable);
  EXPECT_TRUE(out[1].ok());  // its file was written; only rank 0 publishes
  DirectoryRemoteStore remote(dir_, cleaner_.job());
  auto complete = remote.ListComplete();
  ASSERT_TRUE(complete.ok());
  EXPECT_TRUE(complete->empty());
}

// Pruning older versions is housekeeping: when it fails, the version just
// published is still persisted, and the persist says so.
class FailingPruneStore : public DirectoryRemoteStore {
 public:
  using DirectoryRemoteStore::DirectoryRemoteStore;
  Status Prune(int) override { return Status::IoError("test: prune failed"); }
};

TEST_F(PersisterTest, AFailedPruneDoesNotFailThePersist) {
  make_remote_ = [this] { return std::make_shared<FailingPruneStore>(dir_, cleaner_.job()); };
  std::vector<int> pins;
  auto out = PersistOnThreads(2, 5, nullptr, &pins);
  for (const Status& s : out) EXPECT_TRUE(s.ok()) << s.ToString();
  DirectoryRemoteStore remote(dir_, cleaner_.job());
  auto complete = remote.ListComplete();
  ASSERT_TRUE(complete.ok());
  EXPECT_EQ(*complete, std::vector<uint64_t>{5});
}

}  // namespace
}  // namespace memento::runtime
