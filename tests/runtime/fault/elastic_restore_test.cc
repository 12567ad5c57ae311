// Elastic restore, written once and run under both harnesses (harness/spawn.h):
// as threads over the in-process transport (label local) and as processes
// under real mpirun (labels mpi;fault). A job checkpoints global tensors
// sharded over N nodes, nodes are lost (their segments unlinked), and the job
// is relaunched on N' != N nodes (or another number of ranks per node) with
// MEMENTO_ELASTIC: every rank must get exactly the slices it registered of
// the checkpointed global tensors, from memory when the scheme survives the
// loss, from the remote tier for exactly the missing old slices otherwise,
// then go on training and survive a further loss under the new topology.
// The job itself is elastic_job.h's; the refusals are elastic_refusal_test.cc's.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "elastic_job.h"
#include "harness/spawn.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/directory_remote_store.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/shm_segment.h"
#include "store_damage.h"

namespace memento::runtime {
namespace {

using namespace elastic_job;  // NOLINT(build/namespaces): the shared job
using testing::RankContext;
using testing::Spawn;

class ElasticScheme : public ::testing::TestWithParam<std::string> {};

// 8 -> 6 after losing 2 nodes without spares, then a further loss on 6.
TEST_P(ElasticScheme, EightToSixAfterLosingTwo) {
  const std::string scheme = GetParam();
  // Nodes 1 and 4 are in different replica pairs and parity groups for
  // every scheme here, so memory serves.
  Spawn(8, [&](RankContext& ctx) { Train(ctx, Topo{8, 1, {}}, scheme, 1, 3, false); });
  Lose({1, 4});
  const Topo six{6, 1, {0, 2, 3, 5, 6, 7}};
  Spawn(6, [&](RankContext& ctx) { RestoreElastic(ctx, six, scheme, {3, false}, false); });
  // Protected under the new topology, the old stores are gone.
  testing::OnDriver([] {
    auto names = ShmSegment::List(NodeStore::JobPrefix(testing::SpawnJob()));
    ASSERT_TRUE(names.ok());
    for (const std::string& n : *names) {
      EXPECT_EQ(n.find(NodeStore::kElasticSuffix), std::string::npos) << n;
    }
  });
  // Protected under the new topology: losing one of the six is survivable.
  Lose({3});
  Spawn(6, [&](RankContext& ctx) { RestorePlain(ctx, six, scheme, 4); });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

INSTANTIATE_TEST_SUITE_P(Schemes, ElasticScheme, ::testing::Values("replica:2", "xor:3", "rs:4+2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == ':' || c == '+') c = '_';
                           }
                           return n;
                         });

// 8 -> 7: one node lost and no spare.
TEST(Elastic, EightToSevenAfterLosingOne) {
  Spawn(8, [&](RankContext& ctx) { Train(ctx, Topo{8, 1, {}}, "xor:3", 1, 2, false); });
  Lose({5});
  const Topo seven{7, 1, {0, 1, 2, 3, 4, 6, 7}};
  Spawn(7, [&](RankContext& ctx) { RestoreElastic(ctx, seven, "xor:3", {2, false}, false); });
  Lose({2});
  Spawn(7, [&](RankContext& ctx) {
    RestorePlain(ctx, Topo{7, 1, {0, 1, 2, 3, 4, 6, 7}}, "xor:3", 3);
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// 8 -> 7 with node 2's store header damaged as well: its store is set aside
// (node 2 counts as lost, its group's parity serves it) and removed once the
// elastic restore worked, as after a plain one.
TEST(Elastic, ADamagedStoreSetAsideGoesOnceTheElasticRestoreWorked) {
  Spawn(8, [&](RankContext& ctx) { Train(ctx, Topo{8, 1, {}}, "xor:3", 1, 2, false); });
  Lose({5});
  std::string segment;
  testing::OnDriver([&] {
    const Config c = MakeConfig(Topo{8, 1, {}}, 2, "xor:3", false, false);
    auto name = NodeStore::SegmentName({c.job, NodeIdentity(c, 2), 0});
    ASSERT_TRUE(name.ok()) << name.status().ToString();
    segment = *name;
    testing::FlipSegmentByte(segment, 100);
  });
  const Topo seven{7, 1, {0, 1, 2, 3, 4, 6, 7}};
  Spawn(7, [&](RankContext& ctx) { RestoreElastic(ctx, seven, "xor:3", {2, false}, false); });
  testing::OnDriver([&] { EXPECT_TRUE(testing::SetAsideOf(segment).empty()); });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// 8 -> 7 under rs:4+2 with every parity region of node 2's v3 damaged (they
// fail their sealed crc32c): the decode that read one of them is found out
// by its holder's check, that row is marked bad and the plan is made again
// with the other parity row, bit-exact from memory.
TEST(Elastic, ADamagedParityRowIsMarkedBadAndTheOtherOneDecodes) {
  Spawn(8, [&](RankContext& ctx) { Train(ctx, Topo{8, 1, {}}, "rs:4+2", 1, 3, false); });
  Lose({1});
  testing::OnDriver([] {
    const Topo eight{8, 1, {}};
    const int holder = 2;
    auto store = NodeStore::Attach(
        {testing::SpawnJob(),
         NodeIdentity(MakeConfig(eight, holder, "rs:4+2", false, false), holder), 0});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_GT(testing::FlipNewestParityRegions(*store), 0) << "node 2 holds no parity row";
  });
  const Topo seven{7, 1, {0, 2, 3, 4, 5, 6, 7}};
  Expect want{3, false};
  want.note = "payload crc32c";  // a parity row read failed its seal, and was passed over
  Spawn(7, [&](RankContext& ctx) { RestoreElastic(ctx, seven, "rs:4+2", want, false); });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// 6 nodes train replica:2 to v2, node 4 is lost, and the job is relaunched
// elastically on the 5 survivors, where `attempt` (on every rank) restores
// v2 and sees it fail to commit under the new topology. The old stores must
// stay, and the next relaunch restores from them again.
void OldStoresOutliveAFailedNewVersion(
    const std::function<void(RankContext&, const Topo&)>& attempt) {
  Spawn(6, [&](RankContext& ctx) { Train(ctx, Topo{6, 1, {}}, "replica:2", 1, 2, false); });
  Lose({4});
  const Topo five{5, 1, {0, 1, 2, 3, 5}};
  Spawn(5, [&](RankContext& ctx) { attempt(ctx, five); });
  testing::OnDriver([] {
    auto names = ShmSegment::List(NodeStore::JobPrefix(testing::SpawnJob()));
    ASSERT_TRUE(names.ok());
    int aside = 0;
    for (const std::string& n : *names)
      aside += n.find(NodeStore::kElasticSuffix) != std::string::npos;
    EXPECT_EQ(aside, 5);
  });
  Spawn(5, [&](RankContext& ctx) { RestoreElastic(ctx, five, "replica:2", {2, false}, false); });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// A rank fails to seal the restored version (as a rank dying during the
// background protect would): Restore already returned the right bytes.
TEST(Elastic, AFailureBeforeTheNewTopologyCommitsKeepsTheOldStores) {
  OldStoresOutliveAFailedNewVersion([](RankContext& ctx, const Topo& five) {
    FaultHooks hooks;
    const bool victim = ctx.rank() == 2;
    hooks.at_stage = [victim](Stage stage, uint64_t version) {
      if (victim && stage == Stage::kSeal && version == 2) {
        return Status::IoError("injected: this rank dies before sealing");
      }
      return Status::Ok();
    };
    Rank r = Open(ctx, five, "replica:2", /*elastic=*/true, false, false, std::move(hooks));
    if (!r.ck) return;
    auto report = r.ck->Restore();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(Wrong(r, 2), 0u);
    EXPECT_FALSE(r.ck->Wait().ok());
  });
}

// The restored version's protect under the new topology fails (one rank
// cannot seal it): ProtectionState() says kUnprotected from then on, also
// while the next Save's version is in flight (asked on the commit thread,
// at that version's seal), until that version commits.
TEST(Elastic, AFailedBackgroundProtectIsUnprotectedUntilTheNextCommit) {
  Spawn(6, [&](RankContext& ctx) { Train(ctx, Topo{6, 1, {}}, "replica:2", 1, 2, false); });
  Lose({4});
  const Topo five{5, 1, {0, 1, 2, 3, 5}};
  Spawn(5, [&](RankContext& ctx) {
    auto engine = std::make_shared<std::atomic<Checkpointer*>>(nullptr);
    auto during_v3 = std::make_shared<std::atomic<int>>(-1);
    FaultHooks hooks;
    const bool victim = ctx.rank() == 2;
    hooks.at_stage = [victim, engine, during_v3](Stage stage, uint64_t version) {
      if (victim && stage == Stage::kSeal && version == 2) {
        return Status::IoError("injected: this rank dies before sealing");
      }
      if (stage == Stage::kSeal && version == 3 && engine->load() != nullptr) {
        *during_v3 = static_cast<int>(engine->load()->ProtectionState());
      }
      return Status::Ok();
    };
    Rank r = Open(ctx, five, "replica:2", /*elastic=*/true, false, false, std::move(hooks));
    if (!r.ck) return;
    *engine = r.ck.get();
    auto report = r.ck->Restore();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_FALSE(r.ck->Wait().ok());
    EXPECT_EQ(r.ck->ProtectionState(), Protection::kUnprotected) << "rank " << ctx.rank();
    Fill(r, 3);
    ASSERT_TRUE(r.ck->Save(3).ok());
    ASSERT_TRUE(r.ck->Wait().ok()) << "rank " << ctx.rank();
    EXPECT_EQ(during_v3->load(), static_cast<int>(Protection::kUnprotected))
        << "rank " << ctx.rank() << ": v3 in flight after the failed re-protect";
    EXPECT_EQ(r.ck->ProtectionState(), Protection::kProtected) << "rank " << ctx.rank();
    *engine = nullptr;
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// A chunk stage that refuses to begin every version.
class RefusingStage : public ChunkStage {
 public:
  Status Begin(uint64_t version, int, int) override {
    return Status::Unavailable("test: stage refuses v" + std::to_string(version));
  }
  Status OnChunk(const Chunk&) override { return Status::Ok(); }
  Status End(uint64_t, const Status&) override { return Status::Ok(); }
};

// The restored version's snapshot under the new topology cannot start on one
// rank: every rank's Restore still returns the right bytes (that rank's says
// "unprotected") and the version commits nowhere (every Wait() says so).
TEST(Elastic, ASnapshotThatCannotStartOnOneRankFailsNoRankAlone) {
  OldStoresOutliveAFailedNewVersion([](RankContext& ctx, const Topo& five) {
    RefusingStage refusing;
    Rank r = Open(ctx, five, "replica:2", /*elastic=*/true, false);
    if (!r.ck) return;
    const bool victim = ctx.rank() == 2;
    if (victim) {
      ASSERT_TRUE(r.ck->AddChunkStage(&refusing).ok());
    }
    auto report = r.ck->Restore();
    ASSERT_TRUE(report.ok()) << "rank " << ctx.rank() << ": " << report.status().ToString();
    EXPECT_EQ(Wrong(r, 2), 0u);
    EXPECT_EQ(report->protection, victim ? "unprotected" : "re-protecting") << report->ToString();
    EXPECT_FALSE(r.ck->Wait().ok()) << "rank " << ctx.rank();
    r.ck.reset();  // before `refusing` goes
  });
}

TEST(Elastic, FourToEightNodes) {
  Spawn(4, [&](RankContext& ctx) { Train(ctx, Topo{4, 1, {}}, "xor:3", 1, 2, false); });
  Spawn(8, [&](RankContext& ctx) {
    RestoreElastic(ctx, Topo{8, 1, {}}, "xor:3", {2, false}, false);
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

TEST(Elastic, TwoRanksPerNodeToOne) {
  Spawn(8, [&](RankContext& ctx) { Train(ctx, Topo{4, 2, {}}, "replica:2", 1, 2, false); });
  Lose({1});
  Spawn(3, [&](RankContext& ctx) {
    RestoreElastic(ctx, Topo{3, 1, {0, 2, 3}}, "replica:2", {2, false}, false);
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// rs:4+2 keeps two parities per group: losing 3 nodes of the group leaves
// their slices to the remote tier, and only theirs.
TEST(Elastic, UnsurvivableLossReadsOnlyTheMissingSlicesRemotely) {
  Spawn(6, [&](RankContext& ctx) { Train(ctx, Topo{6, 1, {}}, "rs:4+2", 1, 2, true); });
  Lose({0, 1, 2});
  Spawn(4, [&](RankContext& ctx) {
    RestoreElastic(ctx, Topo{4, 1, {3, 4, 5, 6}}, "rs:4+2", {2, true, ShardedBytes(6, 3)}, true);
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// The remote tier as the config names it, counting the rank files read and
// the bytes of the largest entry asked for whole, into one buffer.
class CountingRemoteStore : public DirectoryRemoteStore {
 public:
  using DirectoryRemoteStore::DirectoryRemoteStore;
  Status ReadRankFile(uint64_t version, int rank,
                      const std::vector<RemoteEntryTarget>& targets) override {
    ++reads[rank];
    for (const RemoteEntryTarget& t : targets) {
      if (t.data != nullptr) whole = std::max(whole, t.capacity);
    }
    return DirectoryRemoteStore::ReadRankFile(version, rank, targets);
  }
  std::map<int, int> reads;  // old world rank -> reads of its file
  uint64_t whole = 0;
};

// No node store survives at all: the remote version the 4 old ranks wrote is
// resharded onto 3, each new rank reading each old rank file it needs once
// (for all the entries it takes from it: a read checks the whole file), the
// entries streaming through into the new slices, none held whole.
TEST(Elastic, WithoutMemoryTheRemoteFilesAreResharded) {
  Spawn(4, [&](RankContext& ctx) { Train(ctx, Topo{4, 1, {}}, "xor:3", 1, 2, true); });
  Lose({0, 1, 2, 3});
  Spawn(3, [&](RankContext& ctx) {
    // Every old slice once, and the replicated bias and step once per new rank.
    const uint64_t all = ShardedBytes(4, 4) + 3 * (kBias * 4 + 8);
    auto store =
        std::make_shared<CountingRemoteStore>(testing::SpawnDir() + "/remote", testing::SpawnJob());
    RestoreElastic(ctx, Topo{3, 1, {0, 1, 2}}, "xor:3", {2, true, all, false}, true, store);
    EXPECT_FALSE(store->reads.empty());
    for (const auto& [rank, n] : store->reads) {
      EXPECT_EQ(n, 1) << "new rank " << ctx.rank() << " read old rank " << rank << "'s file " << n
                      << " times";
    }
    EXPECT_EQ(store->whole, 0u) << "new rank " << ctx.rank() << " held an old entry whole";
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// A job shrinks (4 -> 2 nodes, every node's memory lost: v2 resharded from
// the remote tier), persists v3 on 2 ranks, loses its memory again and is
// relaunched on 4. The remote tier holds v2 of 4 ranks and v3 of 2: v3 is
// the run's newest, so the relaunch must reshard it (elastic) or say that it
// needs MEMENTO_ELASTIC, not restore v2 of its own rank count and go back a
// version without a word.
TEST(Elastic, GrowingBackReshardsTheNewestRemoteVersionNotAnOlderOne) {
  Spawn(4, [&](RankContext& ctx) { Train(ctx, Topo{4, 1, {}}, "xor:3", 1, 2, true); });
  Lose({0, 1, 2, 3});
  Spawn(2, [&](RankContext& ctx) {
    const uint64_t all = ShardedBytes(4, 4) + 2 * (kBias * 4 + 8);
    RestoreElastic(ctx, Topo{2, 1, {0, 1}}, "replica:2", {2, true, all, false}, true);
  });
  Lose({0, 1});
  Spawn(4, [&](RankContext& ctx) {
    Rank r = Open(ctx, Topo{4, 1, {}}, "xor:3", /*elastic=*/false, /*remote=*/true);
    if (!r.ck) return;
    auto report = r.ck->Restore();
    ASSERT_FALSE(report.ok()) << "rank " << ctx.rank() << " restored " << report->ToString();
    EXPECT_EQ(report.status().code(), StatusCode::kElasticRestoreNeeded)
        << report.status().ToString();
    EXPECT_NE(report.status().ToString().find("MEMENTO_ELASTIC=1"), std::string::npos)
        << report.status().ToString();
  });
  Spawn(4, [&](RankContext& ctx) {
    const uint64_t all = ShardedBytes(2, 2) + 4 * (kBias * 4 + 8);
    RestoreElastic(ctx, Topo{4, 1, {}}, "xor:3", {3, true, all, false}, true);
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// An older run under this job id left its stores (4 nodes, v1-v2); a newer
// run on 2 other nodes persisted v3-v4 and lost its memory. The relaunch on 3
// of the older run's nodes restores v4 from the newer run's remote files,
// passing over the older run's stores (their topology and catalogs are not
// the newer run's).
TEST(Elastic, AnOlderRunsStoresArePassedOver) {
  Spawn(4, [&](RankContext& ctx) { Train(ctx, Topo{4, 1, {}}, "xor:3", 1, 2, true); });
  Spawn(2, [&](RankContext& ctx) { Train(ctx, Topo{2, 1, {10, 11}}, "replica:2", 3, 4, true); });
  Lose({10, 11});
  Spawn(3, [&](RankContext& ctx) {
    const uint64_t all = ShardedBytes(2, 2) + 3 * (kBias * 4 + 8);
    RestoreElastic(ctx, Topo{3, 1, {0, 1, 2}}, "replica:2", {4, true, all, false}, true);
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// An elastic relaunch (4 -> 2 nodes) whose old stores hold no version
// starts afresh and commits versions under the new topology: the old stores
// go with its first commit. A relaunch on the same 2 nodes then restores the
// newest of those versions from memory, not the old stores' nothing.
TEST(Elastic, OldStoresOfAFailedElasticRestoreGoOnceTheNewTopologyCommits) {
  Spawn(4, [&](RankContext& ctx) {
    Rank r = Open(ctx, Topo{4, 1, {}}, "replica:2", /*elastic=*/false, /*remote=*/false);
    if (!r.ck) return;
    EXPECT_EQ(r.ck->Restore().status().code(), StatusCode::kNotFound);  // stores, no version
  });
  auto aside = [] {
    auto names = ShmSegment::List(NodeStore::JobPrefix(testing::SpawnJob()));
    EXPECT_TRUE(names.ok()) << names.status().ToString();
    size_t n = 0;
    if (!names.ok()) return n;
    for (const std::string& name : *names) {
      n += NodeStore::IsElasticAside(name);
    }
    return n;
  };
  const Topo two{2, 1, {0, 1}};
  Spawn(2, [&](RankContext& ctx) {
    Rank r = Open(ctx, two, "replica:2", /*elastic=*/true, /*remote=*/false);
    if (!r.ck) return;
    EXPECT_EQ(r.ck->Restore().status().code(), StatusCode::kNotFound);
    if (ctx.rank() == 0) {
      EXPECT_GT(aside(), 0u);  // kept while nothing committed
    }
    for (uint64_t step = 1; step <= 3; ++step) {
      Fill(r, step);
      ASSERT_TRUE(r.ck->Save(step).ok());
      ASSERT_TRUE(r.ck->Wait().ok()) << "v" << step;
    }
  });
  testing::OnDriver([&] { EXPECT_EQ(aside(), 0u); });
  Spawn(2, [&](RankContext& ctx) {
    Rank r = Open(ctx, two, "replica:2", /*elastic=*/true, /*remote=*/false);
    if (!r.ck) return;
    auto report = r.ck->Restore();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_FALSE(report->elastic);
    EXPECT_EQ(report->version, 3u);
    EXPECT_EQ(Wrong(r, 3), 0u);
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// The run goes on after an elastic restore (4 -> 3 nodes) without persisting
// again; then 2 of the 3 nodes are lost and the job is relaunched on 2. Memory
// cannot serve, and the newest remote version is the one the 4 old ranks
// wrote: its files are numbered by the 4-rank topology, not by the 3-rank one
// the surviving store records. The restore is refused, naming both, rather
// than reading other slices under those numbers.
TEST(Elastic, ARemoteVersionOfAnotherRankCountIsNotReadUnderTheStoresNumbers) {
  Spawn(4, [&](RankContext& ctx) { Train(ctx, Topo{4, 1, {}}, "replica:2", 1, 2, true); });
  Lose({3});
  Spawn(3, [&](RankContext& ctx) {
    RestoreElastic(ctx, Topo{3, 1, {0, 1, 2}}, "replica:2", {2, false}, false);
  });
  Lose({0, 1});
  Spawn(2, [&](RankContext& ctx) {
    Rank r = Open(ctx, Topo{2, 1, {2, 5}}, "replica:2", /*elastic=*/true, /*remote=*/true);
    if (!r.ck) return;
    auto report = r.ck->Restore();
    ASSERT_FALSE(report.ok()) << "rank " << ctx.rank() << ": " << report->ToString();
    EXPECT_NE(report.status().ToString().find("remote version 2 was written by 4 ranks, the "
                                              "surviving node stores by 3x1"),
              std::string::npos)
        << "rank " << ctx.rank() << ": " << report.status().ToString();
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// Every old node lost and xor:3 relaunched on 3 nodes, rank 1 reading the
// remote tier through `failing` (the others through the config's): every
// rank's Restore must fail, and `check(rank, report)` says how; then a
// relaunch whose ranks can all read the remote tier restores.
template <typename FailingStore>
void RestoreWithOneFailingRemote(
    const std::function<void(int rank, const Result<RestoreReport>& report, double took)>& check) {
  Spawn(4, [&](RankContext& ctx) { Train(ctx, Topo{4, 1, {}}, "xor:3", 1, 2, true); });
  Lose({0, 1, 2, 3});
  const Topo three{3, 1, {0, 1, 2}};
  Spawn(3, [&](RankContext& ctx) {
    std::shared_ptr<RemoteStore> store;
    if (ctx.rank() == 1) {
      store = std::make_shared<FailingStore>(testing::SpawnDir() + "/remote", testing::SpawnJob());
    }
    Rank r = Open(ctx, three, "xor:3", true, true, false, {}, std::move(store));
    if (!r.ck) return;
    const auto t0 = std::chrono::steady_clock::now();
    auto report = r.ck->Restore();
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(report.ok()) << "rank " << ctx.rank();
    EXPECT_NE(report.status().code(), StatusCode::kTimeout) << report.status().ToString();
    check(ctx.rank(), report, took);
  });
  Spawn(3, [&](RankContext& ctx) {
    const uint64_t all = ShardedBytes(4, 4) + 3 * (kBias * 4 + 8);
    RestoreElastic(ctx, three, "xor:3", {2, true, all, false}, true);
  });
  testing::OnDriver([] { testing::SpawnCleanup(); });
}

// The remote tier as the config names it, except that listing a version's
// files fails on this rank (an I/O error of its own).
class FailingListRemoteStore : public DirectoryRemoteStore {
 public:
  using DirectoryRemoteStore::DirectoryRemoteStore;
  Result<std::vector<RemoteEntryInfo>> ListEntries(uint64_t, int) override {
    return Status::IoError("test: listing the remote files failed");
  }
};

// No store survives and one new rank cannot list the remote files: every
// rank's Restore fails at once, that rank's with its own error and the
// others' naming another rank, instead of the others waiting for it in the
// next collective until the timeout.
TEST(Elastic, ARemoteErrorOnOneRankFailsEveryRankAtOnce) {
  RestoreWithOneFailingRemote<FailingListRemoteStore>(
      [](int rank, const Result<RestoreReport>& report, double) {
        const std::string why = report.status().ToString();
        const char* want =
            rank == 1 ? "test: listing the remote files failed" : "failed on another rank";
        EXPECT_NE(why.find(want), std::string::npos) << "rank " << rank << ": " << why;
      });
}

class FailingManifestRemoteStore : public DirectoryRemoteStore {
 public:
  using DirectoryRemoteStore::DirectoryRemoteStore;
  Result<RemoteManifest> ReadManifest(uint64_t) override {
    return Status::IoError("test: reading the remote manifest failed");
  }
};

// No store survives and one new rank cannot read the remote manifests: the
// ranks decide together whether to reshard the remote version another rank
// count wrote, so none of them goes into the elastic restore's collectives
// alone (to wait there for the others until the timeout); every rank fails
// at once.
TEST(Elastic, TheRanksAgreeWhetherToReshardTheRemoteVersion) {
  RestoreWithOneFailingRemote<FailingManifestRemoteStore>(
      [](int rank, const Result<RestoreReport>& report, double took) {
        const std::string why = report.status().ToString();
        EXPECT_EQ(why.find("elastic restore"), std::string::npos) << "rank " << rank << ": " << why;
        EXPECT_LT(took, 10.0) << "rank " << rank << ": " << why;
      });
}

}  // namespace
}  // namespace memento::runtime
