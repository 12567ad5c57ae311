// Fault scenarios written once, run under both harnesses (harness/spawn.h):
// as threads over the in-process transport (label local) and as processes
// under real mpirun (labels mpi;fault). Each scenario is a sequence of
// launches of the same job: train (a rank may crash at an injected stage),
// lose nodes (their segments unlinked), restore, and the restore must give
// exactly the right version, bit-exact on every rank. fault_test.sh runs the
// remaining scenarios (remote-tier kills, corruption, replacement nodes)
// with the fault_worker binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/spawn.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/node_identity.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/shm_segment.h"
#include "store_damage.h"
#include "test_pattern.h"

namespace memento::runtime {
namespace {

using testing::Pattern;
using testing::RankContext;
using testing::Spawn;

// With 4 KiB chunks: pieces within one entry, and after the third entry a run
// of entries smaller than a chunk, so that several pieces in a row straddle
// entries (a restore lands those through bounce buffers while the next
// pieces are being received).
const std::vector<size_t> kEntryBytes = {30011, 4096 * 3, 77,   1500, 1500, 1500, 1500,
                                         1500,  1500,     1500, 1500, 1500, 1500, 1500};

struct Job {
  int ranks = 4;
  int ranks_per_node = 2;
  std::string scheme = "none";
  int slots = 2;
};

Config MakeConfig(const Job& job) {
  Config c;
  c.job = testing::SpawnJob();
  c.ranks_per_node = job.ranks_per_node;
  c.scheme = job.scheme;
  c.slots = job.slots;
  c.chunk_bytes = 4096;
  c.threads = 2;
  c.persist_every = 0;
  c.timeout_s = 20;
  return c;
}

// Where a rank crashes: at `stage` of version `version`, rank `rank`.
struct CrashPoint {
  Stage stage = Stage::kSnapshot;
  uint64_t version = 0;  // 0: nobody crashes
  int rank = -1;
};

struct RankState {
  std::vector<std::vector<uint8_t>> bufs;
  std::unique_ptr<Checkpointer> ck;
};

RankState Open(RankContext& ctx, const Job& job, const CrashPoint& crash = CrashPoint()) {
  RankState st;
  FaultHooks hooks;
  if (crash.version > 0 && crash.rank == ctx.rank()) {
    hooks.at_stage = [&ctx, crash](Stage s, uint64_t v) {
      return s == crash.stage && v == crash.version ? ctx.Crash() : Status::Ok();
    };
  }
  auto ck = Checkpointer::Create(MakeConfig(job), ctx.transport(), nullptr, hooks);
  EXPECT_TRUE(ck.ok()) << ck.status().ToString();
  if (!ck.ok()) return st;
  st.ck = std::move(ck).value();
  for (size_t e = 0; e < kEntryBytes.size(); ++e) {
    st.bufs.emplace_back(kEntryBytes[e] + ctx.rank());
    EXPECT_TRUE(st.ck->RegisterBuffer("e" + std::to_string(e), st.bufs[e].data(),
                                      st.bufs[e].size())
                    .ok());
  }
  return st;
}

// Saves versions 1..steps; stops at the first failure, which only a launch
// with a crash may have, and only from the crashed version on.
void Train(RankContext& ctx, const Job& job, uint64_t steps, const CrashPoint& crash) {
  RankState st = Open(ctx, job, crash);
  if (!st.ck) return;
  for (uint64_t step = 1; step <= steps; ++step) {
    for (size_t e = 0; e < st.bufs.size(); ++e) {
      for (size_t i = 0; i < st.bufs[e].size(); ++i) st.bufs[e][i] = Pattern(ctx.rank(), step, e, i);
    }
    Status s = st.ck->Save(step);
    if (s.ok()) s = st.ck->Wait();
    if (!s.ok() || ctx.crashed()) {
      EXPECT_GT(crash.version, 0u) << "v" << step << ": " << s.ToString();
      EXPECT_GE(step, crash.version) << s.ToString();
      return;
    }
  }
  EXPECT_EQ(crash.version, 0u) << "no rank crashed";
}

// Restores; requires a version in [min, max] from memory, bit-exact, the
// same on every rank. With `rebuilt`, the ranks of the nodes given get every
// entry from that source (a peer's replica, a decode) and the others from
// their own store.
void Restore(RankContext& ctx, const Job& job, uint64_t min, uint64_t max,
             std::optional<std::pair<std::vector<int>, RestoreSource>> rebuilt = std::nullopt) {
  RankState st = Open(ctx, job);
  if (!st.ck) return;
  auto report = st.ck->Restore();
  ASSERT_TRUE(report.ok()) << "rank " << ctx.rank() << ": " << report.status().ToString();
  EXPECT_GE(report->version, min) << report->ToString();
  EXPECT_LE(report->version, max) << report->ToString();
  const int node = ctx.rank() / job.ranks_per_node;
  for (const RestoredEntry& e : report->entries) {
    EXPECT_NE(e.source, RestoreSource::kRemote) << report->ToString();
    if (!rebuilt) continue;
    const auto& [nodes, source] = *rebuilt;
    const bool lost = std::find(nodes.begin(), nodes.end(), node) != nodes.end();
    EXPECT_EQ(e.source, lost ? source : RestoreSource::kLocalMemory)
        << "rank " << ctx.rank() << " entry " << e.name << ": " << report->ToString();
  }
  for (size_t e = 0; e < st.bufs.size(); ++e) {
    size_t bad = 0;
    for (size_t i = 0; i < st.bufs[e].size(); ++i) {
      bad += st.bufs[e][i] != Pattern(ctx.rank(), report->version, e, i);
    }
    EXPECT_EQ(bad, 0u) << "rank " << ctx.rank() << " entry " << e;
  }
  // What the lost nodes held may still be rebuilt in the background (its
  // collectives on the commit thread): wait for it before collectives of our own.
  EXPECT_TRUE(st.ck->Wait().ok());
  EXPECT_EQ(st.ck->ProtectionState(), Protection::kProtected) << report->ToString();
  auto lo = ctx.transport()->AllReduceMin(static_cast<int64_t>(report->version));
  auto hi = ctx.transport()->AllReduceMax(static_cast<int64_t>(report->version));
  ASSERT_TRUE(lo.ok() && hi.ok());
  EXPECT_EQ(*lo, *hi) << "ranks restored different versions";
}

// Unlinks the segments of the virtual nodes `nodes` (driver only).
void LoseNodes(const Job& job, const std::vector<int>& nodes) {
  testing::OnDriver([&] {
    const Config c = MakeConfig(job);
    for (int node : nodes) {
      testing::LoseNode(c.job, NodeIdentity(c, node * job.ranks_per_node));
    }
  });
}

// The segment name of virtual node `node`'s first lane.
std::string SegmentOf(const Job& job, int node) {
  const Config c = MakeConfig(job);
  auto name = NodeStore::SegmentName({c.job, NodeIdentity(c, node * job.ranks_per_node), 0U});
  EXPECT_TRUE(name.ok()) << name.status().ToString();
  return name.ok() ? *name : std::string();
}

StoreId NodeStoreId(const Job& job, int node) {
  const Config c = MakeConfig(job);
  return {c.job, NodeIdentity(c, node * job.ranks_per_node), 0};
}

class FaultScenario : public ::testing::Test {
 protected:
  void TearDown() override { testing::SpawnCleanup(); }
};

TEST_F(FaultScenario, Basic) {
  const Job job;
  Spawn(job.ranks, [&](RankContext& ctx) { Train(ctx, job, 3, {}); });
  Spawn(job.ranks, [&](RankContext& ctx) { Restore(ctx, job, 3, 3); });
}

TEST_F(FaultScenario, KillDuringSnapshot) {  // v3 committed; rank 1 dies in v4's snapshot
  const Job job;
  Spawn(job.ranks, [&](RankContext& ctx) { Train(ctx, job, 6, {Stage::kSnapshot, 4, 1}); },
        {/*expect_death=*/true});
  Spawn(job.ranks, [&](RankContext& ctx) { Restore(ctx, job, 3, 3); });
}

TEST_F(FaultScenario, KillBeforeSeal) {  // rank 2 dies after v4's snapshot, before sealing
  const Job job;
  Spawn(job.ranks, [&](RankContext& ctx) { Train(ctx, job, 6, {Stage::kSeal, 4, 2}); },
        {/*expect_death=*/true});
  Spawn(job.ranks, [&](RankContext& ctx) { Restore(ctx, job, 3, 3); });
}

TEST_F(FaultScenario, KillBeforeCommit) {  // rank 2 dies after sealing v4: v3 or v4, one version
  const Job job;
  Spawn(job.ranks, [&](RankContext& ctx) { Train(ctx, job, 6, {Stage::kCommit, 4, 2}); },
        {/*expect_death=*/true});
  Spawn(job.ranks, [&](RankContext& ctx) { Restore(ctx, job, 3, 4); });
}

TEST_F(FaultScenario, ReplicaNodeLost) {  // replica:2, 4 nodes x 1: node 3 lost -> its replica
  const Job job{4, 1, "replica:2"};
  Spawn(job.ranks, [&](RankContext& ctx) { Train(ctx, job, 3, {}); });
  LoseNodes(job, {3});
  Spawn(job.ranks, [&](RankContext& ctx) {
    Restore(ctx, job, 3, 3, {{{3}, RestoreSource::kReplica}});
  });
}

TEST_F(FaultScenario, XorNodeLost) {  // xor:3, 4 nodes x 2 ranks: node 1 lost -> decoded
  const Job job{8, 2, "xor:3"};
  Spawn(job.ranks, [&](RankContext& ctx) { Train(ctx, job, 3, {}); });
  LoseNodes(job, {1});
  Spawn(job.ranks, [&](RankContext& ctx) {
    Restore(ctx, job, 3, 3, {{{1}, RestoreSource::kDecode}});
  });
}

TEST_F(FaultScenario, ReedSolomonTwoNodesLost) {  // rs:4+2, 6 nodes x 1: two lost -> decoded
  const Job job{6, 1, "rs:4+2"};
  Spawn(job.ranks, [&](RankContext& ctx) { Train(ctx, job, 3, {}); });
  LoseNodes(job, {0, 1});
  Spawn(job.ranks, [&](RankContext& ctx) {
    Restore(ctx, job, 3, 3, {{{0, 1}, RestoreSource::kDecode}});
  });
}

TEST_F(FaultScenario, KillDuringProtectThenNodeLost) {  // replica:2: rank 1 dies streaming v4
  const Job job{4, 1, "replica:2"};
  Spawn(job.ranks, [&](RankContext& ctx) { Train(ctx, job, 6, {Stage::kSnapshot, 4, 1}); },
        {/*expect_death=*/true});
  LoseNodes(job, {1});
  Spawn(job.ranks, [&](RankContext& ctx) { Restore(ctx, job, 3, 4); });
}

// A version some nodes sealed but the job passed over (not restorable on
// every rank) is not restored later beside the copies of that version the
// run writes anew. 4 nodes, no redundancy, 3 slots (so the old copy would
// outlive the next save): rank 1 dies before sealing v4, which the other
// nodes sealed; the relaunch restores v3 and writes v4 again with other bytes
// (training that is not deterministic), and rank 0 dies after sealing it;
// the next relaunch restores that new v4 on every rank, bit-exact.
TEST_F(FaultScenario, APassedOverVersionIsNotRestoredBesideItsRedo) {
  const Job job{4, 1, "none", 3};
  constexpr uint64_t kRedo = 104;  // the redo's bytes: Pattern of another step
  Spawn(job.ranks,
        [&](RankContext& ctx) {
          Train(ctx, job, 4, {Stage::kSeal, 4, 1});
        },
        {/*expect_death=*/true});
  Spawn(job.ranks,
        [&](RankContext& ctx) {
          RankState st = Open(ctx, job, {Stage::kCommit, 4, 0});
          if (!st.ck) return;
          auto report = st.ck->Restore();
          ASSERT_TRUE(report.ok()) << report.status().ToString();
          ASSERT_EQ(report->version, 3u) << report->ToString();
          for (size_t e = 0; e < st.bufs.size(); ++e) {
            for (size_t i = 0; i < st.bufs[e].size(); ++i) {
              st.bufs[e][i] = Pattern(ctx.rank(), kRedo, e, i);
            }
          }
          Status s = st.ck->Save(4);
          if (s.ok()) s = st.ck->Wait();
          EXPECT_FALSE(s.ok()) << "rank 0 died before v4's commit";
        },
        {/*expect_death=*/true});
  Spawn(job.ranks, [&](RankContext& ctx) {
    RankState st = Open(ctx, job);
    if (!st.ck) return;
    auto report = st.ck->Restore();
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->version, 4u) << report->ToString();
    size_t bad = 0;
    for (size_t e = 0; e < st.bufs.size(); ++e) {
      for (size_t i = 0; i < st.bufs[e].size(); ++i) {
        bad += st.bufs[e][i] != Pattern(ctx.rank(), kRedo, e, i);
      }
    }
    EXPECT_EQ(bad, 0u) << "rank " << ctx.rank() << ": not the redo's bytes";
  });
}

// A damaged store header or layout on one node makes that node lost for the
// planner: under replica:2 its peer's replica serves it, bit-exact, and the
// damaged segment, kept aside until then, is removed once the restore worked.
class CorruptStoreScenario : public FaultScenario,
                             public ::testing::WithParamInterface<long> {};

TEST_P(CorruptStoreScenario, ReplicaServesTheNodeWithTheDamagedStore) {
  const Job job{4, 1, "replica:2"};
  Spawn(job.ranks, [&](RankContext& ctx) { Train(ctx, job, 3, {}); });
  testing::OnDriver([&] {
    testing::FlipSegmentByte(SegmentOf(job, 2), GetParam());
    // What an earlier process that could not restore past the damage left.
    const std::string earlier = SegmentOf(job, 2) + NodeStore::kSetAsideSuffix + "1";
    ASSERT_TRUE(ShmSegment::Create(earlier, 4096).ok());
    ASSERT_EQ(testing::SetAsideOf(SegmentOf(job, 2)).size(), 1u);
  });
  Spawn(job.ranks, [&](RankContext& ctx) {
    Restore(ctx, job, 3, 3, {{{2}, RestoreSource::kReplica}});
  });
  testing::OnDriver([&] {
    EXPECT_TRUE(testing::SetAsideOf(SegmentOf(job, 2)).empty());
    auto store = NodeStore::Attach(NodeStoreId(job, 2), ShmSegment::Access::kReadOnly);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_TRUE(store->FindVersion(3).has_value()) << "v3 re-protected into the fresh store";
  });
}

INSTANTIATE_TEST_SUITE_P(HeaderAndLayout, CorruptStoreScenario, ::testing::Values(100L, 1064L));

// Without redundancy the same damage makes the restore fail, and the damaged
// segment is still there afterwards (set aside, bytes unchanged): nothing is
// unlinked before a restore has succeeded.
TEST_F(FaultScenario, DamagedStoreIsKeptWhenTheRestoreFails) {
  const Job job{2, 1, "none"};
  Spawn(job.ranks, [&](RankContext& ctx) { Train(ctx, job, 3, {}); });
  testing::OnDriver([&] { testing::FlipSegmentByte(SegmentOf(job, 1), 100); });
  Spawn(job.ranks, [&](RankContext& ctx) {
    RankState st = Open(ctx, job);
    if (!st.ck) return;
    auto report = st.ck->Restore();
    EXPECT_FALSE(report.ok()) << report->ToString();
  });
  testing::OnDriver([&] {
    const std::vector<std::string> aside = testing::SetAsideOf(SegmentOf(job, 1));
    ASSERT_EQ(aside.size(), 1u);
    testing::FlipSegmentByte(aside[0], 100);  // flipped back: the original store, intact
    auto store = NodeStore::AttachByName(aside[0], ShmSegment::Access::kReadOnly);
    EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition)
        << "the original header, now under another name: " << store.status().ToString();
  });
}

}  // namespace
}  // namespace memento::runtime
