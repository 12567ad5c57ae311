// The job the elastic restore tests run (elastic_restore_test.cc,
// elastic_refusal_test.cc): global tensors sharded over the ranks of a
// topology of virtual nodes, trained, lost, and restored onto another.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "harness/spawn.h"
#include "memento/runtime/checkpointer.h"

namespace memento::runtime::elastic_job {

using testing::RankContext;

// The global tensors: "rows" [48 x 20] float32 sharded along dim 0, "cols"
// [6 x 24] int16 sharded along dim 1, "bias" [20] float32 replicated on
// every rank (data parallel), "step" [1] int64 replicated.
constexpr int64_t kRows = 48, kRowCols = 20, kColRows = 6, kCols = 24, kBias = 20;

inline float RowValue(uint64_t step, int64_t i, int64_t j) {
  return static_cast<float>(step * 100000 + i * 100 + j) * 0.5f;
}
inline int16_t ColValue(uint64_t step, int64_t i, int64_t j) {
  return static_cast<int16_t>(step * 1000 + i * 37 + j);
}
inline float BiasValue(uint64_t step, int64_t j) { return static_cast<float>(step) + 0.25f * j; }

// One job: `nodes` virtual nodes x `lanes` ranks; node k of this job is
// identity "<job>/<ids[k]>" (ids: which old node each is; default 0..nodes-1).
struct Topo {
  int nodes = 8;
  int lanes = 1;
  std::vector<int> ids;
  int id(int node) const { return ids.empty() ? node : ids.at(node); }
};

inline Config MakeConfig(const Topo& t, int rank, const std::string& scheme, bool elastic,
                         bool remote) {
  Config c;
  c.job = testing::SpawnJob();
  c.node = "vn/" + std::to_string(t.id(rank / t.lanes));
  c.ranks_per_node = 0;  // lanes come from the identities
  c.scheme = scheme;
  c.chunk_bytes = 4096;
  c.threads = 2;
  c.timeout_s = 30;
  c.elastic = elastic;
  if (remote) {
    std::filesystem::create_directories(testing::SpawnDir());
    c.remote_dir = testing::SpawnDir() + "/remote";
    c.persist_every = 1;
  }
  return c;
}

// This rank's slice [begin, end) of `extent` split evenly over `parts`.
inline std::pair<int64_t, int64_t> Split(int64_t extent, int parts, int k) {
  const int64_t base = extent / parts, extra = extent % parts;
  const int64_t begin = k * base + std::min<int64_t>(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

struct Rank {
  // The buffers outlive the Checkpointer (declared first, destroyed last):
  // its background work may still read them until it is destroyed.
  std::vector<float> rows, bias;
  std::vector<int16_t> cols;
  std::unique_ptr<Checkpointer> ck;
  int64_t step = 0;
  int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
};

// Registers this rank's slices of the global tensors. `bad_rows`: a slicing
// that does not tile (every rank takes one row too many).
// `store`: the remote tier to use instead of the one the config names.
inline Rank Open(RankContext& ctx, const Topo& t, const std::string& scheme, bool elastic,
                 bool remote, bool bad_rows = false, FaultHooks hooks = {},
                 std::shared_ptr<RemoteStore> store = nullptr) {
  Rank r;
  auto ck = Checkpointer::Create(MakeConfig(t, ctx.rank(), scheme, elastic, remote),
                                 ctx.transport(), std::move(store), std::move(hooks));
  EXPECT_TRUE(ck.ok()) << ck.status().ToString();
  if (!ck.ok()) return r;
  r.ck = std::move(ck).value();
  std::tie(r.r0, r.r1) = Split(kRows, ctx.size(), ctx.rank());
  if (bad_rows && r.r1 < kRows) ++r.r1;
  std::tie(r.c0, r.c1) = Split(kCols, ctx.size(), ctx.rank());
  r.rows.resize((r.r1 - r.r0) * kRowCols);
  r.cols.resize(kColRows * (r.c1 - r.c0));
  r.bias.resize(kBias);
  EXPECT_TRUE(
      r.ck->RegisterBuffer("rows", r.rows.data(), r.rows.size() * 4,
                           {"float32", {kRows, kRowCols}, {r.r1 - r.r0, kRowCols}, {r.r0, 0}})
          .ok());
  EXPECT_TRUE(r.ck->RegisterBuffer("cols", r.cols.data(), r.cols.size() * 2,
                                   {"int16", {kColRows, kCols}, {kColRows, r.c1 - r.c0}, {0, r.c0}})
                  .ok());
  EXPECT_TRUE(r.ck->RegisterBuffer("bias", r.bias.data(), r.bias.size() * 4,
                                   {"float32", {kBias}, {kBias}, {0}})
                  .ok());
  EXPECT_TRUE(r.ck->RegisterBuffer("step", &r.step, 8, {"int64", {1}, {1}, {0}}).ok());
  return r;
}

inline void Fill(Rank& r, uint64_t step) {
  for (int64_t i = r.r0; i < r.r1; ++i) {
    for (int64_t j = 0; j < kRowCols; ++j) r.rows[(i - r.r0) * kRowCols + j] = RowValue(step, i, j);
  }
  for (int64_t i = 0; i < kColRows; ++i) {
    for (int64_t j = r.c0; j < r.c1; ++j) {
      r.cols[i * (r.c1 - r.c0) + (j - r.c0)] = ColValue(step, i, j);
    }
  }
  for (int64_t j = 0; j < kBias; ++j) r.bias[j] = BiasValue(step, j);
  r.step = static_cast<int64_t>(step);
}

// Elements of this rank's slices that differ from the global tensors at `step`.
inline size_t Wrong(const Rank& r, uint64_t step) {
  size_t bad = 0;
  for (int64_t i = r.r0; i < r.r1; ++i) {
    for (int64_t j = 0; j < kRowCols; ++j) {
      const float want = RowValue(step, i, j);
      bad += std::memcmp(&r.rows[(i - r.r0) * kRowCols + j], &want, 4) != 0;
    }
  }
  for (int64_t i = 0; i < kColRows; ++i) {
    for (int64_t j = r.c0; j < r.c1; ++j)
      bad += r.cols[i * (r.c1 - r.c0) + (j - r.c0)] != ColValue(step, i, j);
  }
  for (int64_t j = 0; j < kBias; ++j) bad += r.bias[j] != BiasValue(step, j);
  bad += r.step != static_cast<int64_t>(step);
  return bad;
}

inline void Train(RankContext& ctx, const Topo& t, const std::string& scheme, uint64_t first,
                  uint64_t last, bool remote) {
  Rank r = Open(ctx, t, scheme, /*elastic=*/false, remote);
  if (!r.ck) return;
  for (uint64_t step = first; step <= last; ++step) {
    Fill(r, step);
    ASSERT_TRUE(r.ck->Save(step).ok());
    ASSERT_TRUE(r.ck->Wait().ok()) << "v" << step;
  }
  if (remote) {
    ASSERT_TRUE(r.ck->WaitPersist().ok());
  }
}

inline void Lose(const std::vector<int>& ids) {
  testing::OnDriver([&] {
    for (int id : ids) testing::LoseNode(testing::SpawnJob(), "vn/" + std::to_string(id));
  });
}

struct Expect {
  uint64_t version = 0;
  bool any_remote = false;           // some entry of some rank comes from remote
  uint64_t remote_bytes = 0;         // read remotely by all nodes together
  bool replicated_in_memory = true;  // "bias" and "step" come from memory
  const char* note = nullptr;        // when set: some rank's report notes say this
};

// Bytes of the sharded slices of `old_ranks` ranks' `lost` of them: what a
// restore must read remotely when their memory is gone (the replicated
// tensors survive on every other node).
inline uint64_t ShardedBytes(int old_ranks, int lost) {
  return static_cast<uint64_t>(lost) *
         (kRows / old_ranks * kRowCols * 4 + kColRows * (kCols / old_ranks) * 2);
}

// Relaunches elastically on `t`, restores, checks every slice bit-exact,
// saves `version + 1` under the new topology (while the restored version may
// still be committing), then checks the sources.
inline void RestoreElastic(RankContext& ctx, const Topo& t, const std::string& scheme,
                           const Expect& want, bool remote,
                           std::shared_ptr<RemoteStore> store = nullptr) {
  Rank r = Open(ctx, t, scheme, /*elastic=*/true, remote, false, {}, std::move(store));
  if (!r.ck) return;
  auto report = r.ck->Restore();
  ASSERT_TRUE(report.ok()) << "rank " << ctx.rank() << ": " << report.status().ToString();
  EXPECT_TRUE(report->elastic);
  EXPECT_EQ(report->version, want.version) << report->ToString();
  EXPECT_EQ(Wrong(r, want.version), 0u) << "rank " << ctx.rank() << " " << report->source_detail;
  // Training resumes while the new topology's protect runs in the background.
  EXPECT_EQ(report->stats.reprotect_mode, "full, background");
  ASSERT_TRUE(r.ck->WaitSnapshot().ok());
  Fill(r, want.version + 1);
  ASSERT_TRUE(r.ck->Save(want.version + 1).ok());
  ASSERT_TRUE(r.ck->Wait().ok());
  bool remote_here = false;
  for (const RestoredEntry& e : report->entries) remote_here |= e.source == RestoreSource::kRemote;
  auto any = ctx.transport()->AllReduceMax(remote_here ? 1 : 0);
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(*any != 0, want.any_remote) << report->source_detail;
  if (want.note != nullptr) {
    bool noted = false;
    for (const std::string& n : report->notes) noted |= n.find(want.note) != std::string::npos;
    auto anywhere = ctx.transport()->AllReduceMax(noted ? 1 : 0);
    ASSERT_TRUE(anywhere.ok());
    EXPECT_EQ(*anywhere, 1) << "no rank's notes say '" << want.note << "': " << report->ToString();
  }
  // The bytes read remotely are exactly the lost old slices'.
  uint64_t remote_bytes = 0;
  for (uint64_t b : report->elastic_remote_per_node) remote_bytes += b;
  EXPECT_EQ(remote_bytes, want.remote_bytes) << report->elastic_plan;
  for (const RestoredEntry& e : report->entries) {
    if (want.replicated_in_memory && (e.name == "bias" || e.name == "step")) {
      EXPECT_NE(e.source, RestoreSource::kRemote) << e.name;
    }
  }
}

// A plain (non-elastic) restore on `t` from memory, bit-exact.
inline void RestorePlain(RankContext& ctx, const Topo& t, const std::string& scheme,
                         uint64_t version) {
  Rank r = Open(ctx, t, scheme, /*elastic=*/false, /*remote=*/false);
  if (!r.ck) return;
  auto report = r.ck->Restore();
  ASSERT_TRUE(report.ok()) << "rank " << ctx.rank() << ": " << report.status().ToString();
  EXPECT_FALSE(report->elastic);
  EXPECT_EQ(report->version, version);
  for (const RestoredEntry& e : report->entries) EXPECT_NE(e.source, RestoreSource::kRemote);
  EXPECT_EQ(Wrong(r, version), 0u) << "rank " << ctx.rank();
}

}  // namespace memento::runtime::elastic_job
