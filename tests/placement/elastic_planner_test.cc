#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "memento/placement/elastic_plan.h"
#include "memento/placement/recovery_planner.h"
#include "test_inventory.h"

namespace memento::placement {
namespace {

using testing::FullInventory;

constexpr int64_t kRows = 8;
constexpr int64_t kCols = 12;
constexpr uint64_t kElem = 2;  // bytes per element ("bfloat16")

enum class Slicing { kRows, kCols, kReplicated };
const char* SlicingName(Slicing s) {
  return s == Slicing::kRows ? "rows" : s == Slicing::kCols ? "cols" : "replicated";
}

// Rank r of `ranks`' slice of the kRows x kCols tensor: contiguous near-equal chunks along
// one dimension, or the whole tensor on every rank (data parallel).
TensorSlice SliceOf(Slicing how, int r, int ranks) {
  TensorSlice s{"bfloat16", {kRows, kCols}, {kRows, kCols}, {0, 0}};
  if (how == Slicing::kReplicated) return s;
  const int d = how == Slicing::kRows ? 0 : 1;
  const int64_t n = s.global_shape[d];
  const int64_t lo = n * r / ranks, hi = n * (r + 1) / ranks;
  s.offsets[d] = lo;
  s.shape[d] = hi - lo;
  return s;
}

uint64_t Bytes(const TensorSlice& s) {
  return static_cast<uint64_t>(s.shape[0] * s.shape[1]) * kElem;
}

// The global tensor's element (i, j), two bytes.
uint16_t Value(int64_t i, int64_t j) { return static_cast<uint16_t>(i * 1000 + j + 1); }

std::vector<uint8_t> Fill(const TensorSlice& s) {
  std::vector<uint8_t> out(Bytes(s));
  for (int64_t i = 0; i < s.shape[0]; ++i) {
    for (int64_t j = 0; j < s.shape[1]; ++j) {
      const uint16_t v = Value(s.offsets[0] + i, s.offsets[1] + j);
      std::memcpy(out.data() + (i * s.shape[1] + j) * kElem, &v, kElem);
    }
  }
  return out;
}

std::vector<RankCatalog> Catalog(int nodes, int lanes, Slicing how) {
  std::vector<RankCatalog> out;
  for (int node = 0; node < nodes; ++node) {
    for (int lane = 0; lane < lanes; ++lane) {
      const TensorSlice s = SliceOf(how, node * lanes + lane, nodes * lanes);
      out.push_back({node, lane, {{"w", Bytes(s), s}}});
    }
  }
  return out;
}

struct Case {
  std::string scheme;
  int old_nodes, old_lanes, new_nodes, new_lanes;
  Slicing old_how, new_how;
  std::vector<int> lost;  // old nodes gone
  std::string Name() const {
    std::string s = scheme + " " + std::to_string(old_nodes) + "x" + std::to_string(old_lanes) +
                    " " + SlicingName(old_how) + " -> " + std::to_string(new_nodes) + "x" +
                    std::to_string(new_lanes) + " " + SlicingName(new_how) + ", lost {";
    for (int n : lost) s += std::to_string(n) + " ";
    return s + "}";
  }
};

// Plans the case: the old plan over what survives (with a remote copy of the version for
// what memory cannot serve), then the elastic plan. New nodes are the survivors in order,
// then fresh nodes; survivors beyond N' are not in the new job (their memory is unused).
struct Planned {
  ElasticInput input;
  ElasticPlan plan;
  bool memory_only = false;  // the old plan needs no remote shard
};

Result<Planned> PlanCase(const Case& c) {
  Planned out;
  MEMENTO_ASSIGN_OR_RETURN(Scheme scheme, Scheme::Parse(c.scheme));
  MEMENTO_ASSIGN_OR_RETURN(Topology topo, Topology::Uniform(c.old_nodes, c.old_lanes));
  MEMENTO_ASSIGN_OR_RETURN(GroupLayout layout, GroupLayout::Build(topo, scheme));
  std::vector<int> survivors;
  for (int n = 0; n < c.old_nodes; ++n) {
    if (std::find(c.lost.begin(), c.lost.end(), n) == c.lost.end()) survivors.push_back(n);
  }
  ElasticInput& in = out.input;
  in.old_nodes = c.old_nodes;
  in.old_lanes = c.old_lanes;
  in.new_nodes = c.new_nodes;
  in.new_lanes = c.new_lanes;
  in.old_node_of_new.assign(c.new_nodes, -1);
  std::set<int> kept;
  for (int j = 0; j < c.new_nodes && j < static_cast<int>(survivors.size()); ++j) {
    in.old_node_of_new[j] = survivors[j];
    kept.insert(survivors[j]);
  }
  RecoveryInput rin;
  rin.new_num_nodes = c.old_nodes;
  rin.remote_versions = {7};
  for (int n = 0; n < c.old_nodes; ++n) {
    if (!kept.count(n)) rin.failed_nodes.push_back(n);
  }
  for (const InventoryItem& it : FullInventory(layout, c.old_lanes, 7)) {
    if (kept.count(it.node)) rin.inventory.push_back(it);
  }
  MEMENTO_ASSIGN_OR_RETURN(in.old_plan, PlanRecovery(topo, layout, rin));
  out.memory_only = true;
  for (const ShardSource& s : in.old_plan.shards) {
    out.memory_only = out.memory_only && s.kind != SourceKind::kRemote;
  }
  in.old_ranks = Catalog(c.old_nodes, c.old_lanes, c.old_how);
  in.new_ranks = Catalog(c.new_nodes, c.new_lanes, c.new_how);
  MEMENTO_ASSIGN_OR_RETURN(out.plan, PlanElastic(in));
  return out;
}

// Checks the plan: every new slice is covered exactly once by pieces inside old slices,
// read from where the old plan says the old bytes are, and assembling the pieces gives
// the global tensor's values.
void CheckPlan(const Case& c, const Planned& p) {
  const std::string ctx = c.Name();
  const ElasticInput& in = p.input;
  const ElasticPlan& plan = p.plan;
  std::map<std::pair<int, int>, const ShardSource*> old_src;
  for (const ShardSource& s : in.old_plan.shards) old_src[{s.node, s.lane}] = &s;
  ASSERT_EQ(plan.targets.size(), in.new_ranks.size()) << ctx;
  for (size_t k = 0; k < plan.targets.size(); ++k) {
    const ElasticTarget& t = plan.targets[k];
    const TensorSlice& want = in.new_ranks[k].entries[0].slice;
    ASSERT_EQ(t.pieces.size(), 1u) << ctx;
    std::vector<uint8_t> got(Bytes(want), 0);
    std::vector<int> covered(Bytes(want) / kElem, 0);
    for (const ElasticPiece& piece : t.pieces[0]) {
      const TensorSlice& have =
          in.old_ranks[piece.old_node * in.old_lanes + piece.old_lane].entries.at(piece.old_entry).slice;
      for (int d = 0; d < 2; ++d) {
        ASSERT_GE(piece.offsets[d], have.offsets[d]) << ctx;
        ASSERT_LE(piece.offsets[d] + piece.shape[d], have.offsets[d] + have.shape[d]) << ctx;
        ASSERT_GE(piece.offsets[d], want.offsets[d]) << ctx;
        ASSERT_LE(piece.offsets[d] + piece.shape[d], want.offsets[d] + want.shape[d]) << ctx;
      }
      const ShardSource& src = *old_src.at({piece.old_node, piece.old_lane});
      switch (src.kind) {
        case SourceKind::kLocal:
          EXPECT_EQ(piece.source, PieceSource::kShard) << ctx;
          ASSERT_GE(piece.serve_node, 0) << ctx;
          EXPECT_EQ(in.old_node_of_new[piece.serve_node], piece.old_node) << ctx;
          break;
        case SourceKind::kReplica:
          EXPECT_EQ(piece.source, PieceSource::kReplica) << ctx;
          ASSERT_GE(piece.serve_node, 0) << ctx;
          EXPECT_EQ(in.old_node_of_new[piece.serve_node], src.from_node) << ctx;
          break;
        case SourceKind::kDecode:
          EXPECT_EQ(piece.source, PieceSource::kDecoded) << ctx;
          EXPECT_GE(piece.serve_node, 0) << ctx;
          break;
        case SourceKind::kRemote:
          EXPECT_EQ(piece.source, PieceSource::kRemote) << ctx;
          EXPECT_EQ(piece.serve_node, -1) << ctx;
          break;
      }
      if (p.memory_only) {
        EXPECT_NE(piece.source, PieceSource::kRemote) << ctx;
      }
      if (piece.source == PieceSource::kShard || piece.source == PieceSource::kReplica) {
        EXPECT_EQ(piece.serve_lane, ServingLane(piece.old_lane, in.new_lanes)) << ctx;
      }
      // Copy the piece from the old slice's bytes into the new slice.
      const std::vector<uint8_t> old_bytes = Fill(have);
      ForEachRun(have, want, piece.offsets, piece.shape, kElem, 0,
                 [&](uint64_t so, uint64_t d_o, uint64_t len) {
                   ASSERT_LE(so + len, old_bytes.size()) << ctx;
                   ASSERT_LE(d_o + len, got.size()) << ctx;
                   std::memcpy(got.data() + d_o, old_bytes.data() + so, len);
                   for (uint64_t e = d_o / kElem; e < (d_o + len) / kElem; ++e) ++covered[e];
                 });
    }
    EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int n) { return n == 1; }))
        << ctx << ": new rank " << k << " not covered exactly once";
    EXPECT_EQ(got, Fill(want)) << ctx << ": new rank " << k << " assembled wrong bytes";
  }
}

std::vector<std::vector<int>> LossSets(int nodes) {
  std::vector<std::vector<int>> out = {{}};
  for (int a = 0; a < nodes; ++a) {
    out.push_back({a});
    for (int b = a + 1; b < nodes; ++b) out.push_back({a, b});
  }
  return out;
}

bool Fits(const std::string& scheme, int nodes) {
  if (scheme == "replica:2") return nodes >= 2;
  if (scheme == "xor:3") return nodes >= 4;
  if (scheme == "rs:4+2") return nodes >= 6;
  return true;
}

// Every old / new slicing of a 2-D tensor over N, N' <= 8 nodes, every loss of up to two
// nodes: the plan covers each new slice exactly once with the right bytes, from memory
// whenever the scheme survives the loss, and from remote for exactly the rest.
TEST(ElasticPlanner, EverySlicingAndLossSetCoversEachNewSliceExactlyOnce) {
  const Slicing all[] = {Slicing::kRows, Slicing::kCols, Slicing::kReplicated};
  int plans = 0, memory_only = 0, with_remote = 0;
  for (const std::string scheme : {"replica:2", "xor:3", "rs:4+2"}) {
    for (int n = 2; n <= 8; ++n) {
      if (!Fits(scheme, n)) continue;
      for (const auto& lost : LossSets(n)) {
        for (int n2 = 1; n2 <= 8; ++n2) {
          for (Slicing a : all) {
            for (Slicing b : all) {
              const Case c{scheme, n, 1, n2, 1, a, b, lost};
              auto p = PlanCase(c);
              ASSERT_TRUE(p.ok()) << c.Name() << ": " << p.status().ToString();
              CheckPlan(c, *p);
              if (HasFatalFailure()) return;
              ++plans;
              (p->memory_only ? memory_only : with_remote)++;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(memory_only, 0);
  EXPECT_GT(with_remote, 0);
  RecordProperty("plans", plans);
}

// Lanes change too: 2 ranks per node onto 1 and 1 onto 2 (fewer ranks per node, more).
TEST(ElasticPlanner, RanksPerNodeChange) {
  const Slicing all[] = {Slicing::kRows, Slicing::kCols, Slicing::kReplicated};
  for (const std::string scheme : {"replica:2", "xor:3"}) {
    for (int n = 2; n <= 4; ++n) {
      if (!Fits(scheme, n)) continue;
      for (const auto& lost : LossSets(n)) {
        if (lost.size() > 1) continue;
        for (auto [l, l2] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 3}}) {
          for (int n2 = 1; n2 <= 5; ++n2) {
            for (Slicing a : all) {
              for (Slicing b : all) {
                const Case c{scheme, n, l, n2, l2, a, b, lost};
                auto p = PlanCase(c);
                ASSERT_TRUE(p.ok()) << c.Name() << ": " << p.status().ToString();
                CheckPlan(c, *p);
                if (HasFatalFailure()) return;
              }
            }
          }
        }
      }
    }
  }
}

// Data-parallel replicas on every surviving node: nothing crosses the network.
TEST(ElasticPlanner, ReplicatedTensorIsReadOnEachNode) {
  const Case c{"replica:2", 8, 1, 6, 1, Slicing::kReplicated, Slicing::kReplicated, {2, 5}};
  auto p = PlanCase(c);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (size_t j = 0; j < 6; ++j) {
    EXPECT_EQ(p->plan.received_bytes_per_node[j], 0u);
    EXPECT_EQ(p->plan.minimum_bytes_per_node[j], 0u);
  }
  EXPECT_EQ(p->plan.max_served_bytes, 0u);
}

// 8 -> 6 after losing two nodes under rs:4+2: the lost shards are decoded once each, on a
// survivor that needs them; the busiest node serves no more than the two decoded shards'
// worth plus its own shard.
TEST(ElasticPlanner, LostShardsAreDecodedOnceOnASurvivor) {
  const Case c{"rs:4+2", 8, 1, 6, 1, Slicing::kRows, Slicing::kRows, {1, 6}};
  auto p = PlanCase(c);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->plan.decode_hosts.size(), 2u);
  std::set<int> decoded;
  for (const DecodeHost& h : p->plan.decode_hosts) {
    decoded.insert(h.old_node);
    EXPECT_GE(h.node, 0);
    EXPECT_LT(h.node, 6);
  }
  EXPECT_EQ(decoded, (std::set<int>{1, 6}));
  for (uint64_t r : p->plan.remote_bytes_per_node) EXPECT_EQ(r, 0u);
  const uint64_t shard = kRows / 8 * kCols * kElem;
  EXPECT_LE(p->plan.max_served_bytes, 3 * shard);
  EXPECT_NE(p->plan.Summary().find("decoded"), std::string::npos);
}

ElasticInput TwoToOne() {
  // Two old ranks (rows 0-3, 4-7), one new rank, nothing lost.
  Case c{"replica:2", 2, 1, 1, 1, Slicing::kRows, Slicing::kRows, {}};
  auto p = PlanCase(c);
  EXPECT_TRUE(p.ok());
  return p->input;
}

std::string ErrorOf(const ElasticInput& in) {
  auto plan = PlanElastic(in);
  EXPECT_FALSE(plan.ok());
  return plan.ok() ? "" : plan.status().ToString();
}

TEST(ElasticPlanner, NewSlicesThatDoNotTileAreRefused) {
  ElasticInput in = TwoToOne();
  in.new_nodes = 2;
  in.old_node_of_new = {0, 1};
  TensorSlice a{"bfloat16", {kRows, kCols}, {5, kCols}, {0, 0}};
  TensorSlice b{"bfloat16", {kRows, kCols}, {4, kCols}, {4, 0}};  // overlaps row 4
  in.new_ranks = {{0, 0, {{"w", Bytes(a), a}}}, {1, 0, {{"w", Bytes(b), b}}}};
  std::string e = ErrorOf(in);
  EXPECT_NE(e.find("new slices of 'w' do not tile"), std::string::npos) << e;
  EXPECT_NE(e.find("overlap"), std::string::npos) << e;
  b = TensorSlice{"bfloat16", {kRows, kCols}, {2, kCols}, {6, 0}};  // rows 5 missing
  a.shape = {5, kCols};
  in.new_ranks = {{0, 0, {{"w", Bytes(a), a}}}, {1, 0, {{"w", Bytes(b), b}}}};
  e = ErrorOf(in);
  EXPECT_NE(e.find("new slices of 'w' do not tile the global tensor [8,12]: they cover 84 of 96"),
            std::string::npos)
      << e;
}

// Slices of a tensor whose element count does not fit 64 bits: a wrapped
// count would let two rows "cover" it, or an offset + extent wrap past the
// bound check.
TEST(ElasticPlanner, ShapesBeyond64BitsAreRefusedNotWrapped) {
  const int64_t big = int64_t{1} << 32;
  for (const auto& [global, shape, offsets, want] :
       std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>,
                              std::string>>{
           {{big, big + 1}, {1, big}, {0, 0}, "more than 2^63 elements"},
           {{1, INT64_MAX}, {1, INT64_MAX}, {0, 1}, "does not fit global shape"}}) {
    ElasticInput in = TwoToOne();
    for (auto* side : {&in.old_ranks, &in.new_ranks}) {
      for (RankCatalog& rank : *side) {
        for (auto& e : rank.entries) e.slice = TensorSlice{"bfloat16", global, shape, offsets};
      }
    }
    std::string e = ErrorOf(in);
    EXPECT_NE(e.find(want), std::string::npos) << e;
  }
}

TEST(ElasticPlanner, DtypeOrGlobalShapeOtherThanTheCheckpointsIsRefused) {
  ElasticInput in = TwoToOne();
  in.new_ranks[0].entries[0].slice.dtype = "float16";
  std::string e = ErrorOf(in);
  EXPECT_NE(e.find("entry 'w': dtype float16"), std::string::npos) << e;
  EXPECT_NE(e.find("differ from the checkpoint's (bfloat16, [8,12])"), std::string::npos) << e;
  in = TwoToOne();
  in.new_ranks[0].entries[0].slice = TensorSlice{"bfloat16", {kRows, 6}, {kRows, 6}, {0, 0}};
  in.new_ranks[0].entries[0].bytes = kRows * 6 * kElem;
  e = ErrorOf(in);
  EXPECT_NE(e.find("global shape [8,6] differ"), std::string::npos) << e;
  in = TwoToOne();
  in.new_ranks[0].entries[0].name = "v";
  e = ErrorOf(in);
  EXPECT_NE(e.find("entry 'v' is not in the checkpoint"), std::string::npos) << e;
  in = TwoToOne();
  for (RankCatalog& rc : in.old_ranks) rc.entries.push_back({"opt", 16, {}});
  e = ErrorOf(in);
  EXPECT_NE(e.find("entry 'opt' is in the checkpoint but not registered: an elastic restore "
                   "would drop it"),
            std::string::npos)
      << e;
  in = TwoToOne();
  in.new_ranks[0].entries[0].bytes = 7;
  e = ErrorOf(in);
  EXPECT_NE(e.find("'w'"), std::string::npos) << e;
  EXPECT_NE(e.find("7 bytes for a slice of 96 elements"), std::string::npos) << e;
}

TEST(ElasticPlanner, OpaqueEntriesRestoreOnlyOntoTheSameRankCount) {
  ElasticInput in = TwoToOne();
  for (RankCatalog& rc : in.old_ranks) rc.entries.push_back({"rng", 16, {}});
  in.new_ranks[0].entries.push_back({"rng", 16, {}});
  std::string e = ErrorOf(in);
  EXPECT_NE(e.find("entry 'rng' has no tensor layout (opaque bytes): it restores only onto 2 "
                   "ranks, not 1"),
            std::string::npos)
      << e;
  // Same rank count on other nodes (2 nodes x 1 -> 1 node x 2): rank k from old rank k.
  in.new_lanes = 2;
  TensorSlice top = SliceOf(Slicing::kRows, 0, 2), bottom = SliceOf(Slicing::kRows, 1, 2);
  in.new_ranks = {{0, 0, {{"w", Bytes(top), top}, {"rng", 16, {}}}},
                  {0, 1, {{"w", Bytes(bottom), bottom}, {"rng", 16, {}}}}};
  auto plan = PlanElastic(in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (int k = 0; k < 2; ++k) {
    const auto& pieces = plan->targets[k].pieces[1];
    ASSERT_EQ(pieces.size(), 1u);
    EXPECT_EQ(pieces[0].old_node, k);
    EXPECT_EQ(pieces[0].old_entry, 1);
    EXPECT_EQ(pieces[0].bytes, 16u);
  }
  in.new_ranks[1].entries[1].bytes = 8;
  e = ErrorOf(in);
  EXPECT_NE(e.find("opaque entry 'rng' of new rank 1 has 8 bytes, the checkpoint's 16"),
            std::string::npos)
      << e;
}

// Column slices: a run per row; trailing dimensions spanned whole merge into one run.
TEST(ElasticPlanner, RunsFollowTheRowMajorLayout) {
  const TensorSlice src{"f", {4, 6}, {4, 3}, {0, 3}};
  const TensorSlice dst{"f", {4, 6}, {4, 6}, {0, 0}};
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> runs;
  ForEachRun(src, dst, {1, 3}, {2, 3}, 4, 0,
             [&](uint64_t s, uint64_t d, uint64_t n) { runs.emplace_back(s, d, n); });
  const std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> want = {{12, 36, 12}, {24, 60, 12}};
  EXPECT_EQ(runs, want);
  runs.clear();
  const TensorSlice rows{"f", {4, 6}, {2, 6}, {2, 0}};
  ForEachRun(rows, dst, {2, 0}, {2, 6}, 4, 0,
             [&](uint64_t s, uint64_t d, uint64_t n) { runs.emplace_back(s, d, n); });
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], std::make_tuple(0ull, 48ull, 48ull));
}

}  // namespace
}  // namespace memento::placement
