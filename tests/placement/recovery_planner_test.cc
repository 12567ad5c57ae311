#include "memento/placement/recovery_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "memento/placement/recoverability.h"
#include "test_inventory.h"

namespace memento::placement {
namespace {

using testing::FullInventory;

bool Valid(const InventoryItem& it) { return it.sealed && it.crc_ok; }

// The planned sources refer to valid items on surviving nodes; decodes read exactly K'
// distinct valid rows of the right stripe and cover every piece of each decoded shard.
void CheckPlanUsesOnlyValidSources(const GroupLayout& layout, const RecoveryInput& in,
                                   const RecoveryPlan& plan, const std::string& ctx) {
  std::set<int> failed(in.failed_nodes.begin(), in.failed_nodes.end());
  auto has = [&](int node, int lane, ItemKind kind, int owner, int stripe, int row) {
    if (failed.count(node)) return false;
    for (const InventoryItem& it : in.inventory) {
      if (it.node == node && it.lane == lane && it.version == plan.version && it.kind == kind &&
          Valid(it) &&
          (kind == ItemKind::kParity ? it.stripe == stripe && it.row == row
                                     : kind == ItemKind::kShard || it.owner == owner)) {
        return true;
      }
    }
    return false;
  };
  ASSERT_EQ(static_cast<int>(plan.shards.size()), layout.num_nodes() * plan.lanes) << ctx;
  for (const ShardSource& s : plan.shards) {
    switch (s.kind) {
      case SourceKind::kLocal:
        EXPECT_TRUE(has(s.node, s.lane, ItemKind::kShard, s.node, -1, -1)) << ctx;
        break;
      case SourceKind::kReplica:
        EXPECT_TRUE(has(s.from_node, s.lane, ItemKind::kReplica, s.node, -1, -1)) << ctx;
        break;
      case SourceKind::kRemote:
        EXPECT_TRUE(in.remote_versions.count(plan.version)) << ctx;
        break;
      case SourceKind::kDecode: {
        const int g = layout.group_of(s.node);
        const ProtectionGroup& grp = layout.group(g);
        std::set<int> stripes;
        for (int d : s.decodes) {
          const StripeDecode& dec = plan.decodes.at(d);
          EXPECT_EQ(dec.group, g) << ctx;
          EXPECT_EQ(dec.lane, s.lane) << ctx;
          stripes.insert(dec.stripe);
          EXPECT_EQ(static_cast<int>(dec.inputs.size()), grp.data) << ctx;
          std::set<int> nodes;
          for (const StripeRow& r : dec.inputs) {
            EXPECT_TRUE(nodes.insert(r.node).second) << ctx;
            if (r.parity) {
              EXPECT_EQ(layout.ParityHolder(g, dec.stripe, r.row), r.node) << ctx;
              EXPECT_TRUE(has(r.node, s.lane, ItemKind::kParity, -1, dec.stripe, r.row)) << ctx;
            } else {
              EXPECT_EQ(layout.DataRowNode(g, dec.stripe, r.row), r.node) << ctx;
              EXPECT_TRUE(has(r.node, s.lane, ItemKind::kShard, r.node, -1, -1)) << ctx;
            }
          }
        }
        for (int i = 0; i < grp.data; ++i) {
          EXPECT_TRUE(stripes.count(layout.StripeOfPiece(s.node, i))) << ctx;
        }
        break;
      }
    }
  }
}

const char* kSchemes[] = {"none",           "replica:2", "replica:3", "replica:2:ring",
                          "replica:3:ring", "xor:1",     "xor:2",     "xor:3",
                          "rs:2+2",         "rs:3+2",    "rs:4+3",    "rs:6+2"};

// Every failure set, N <= 12: the planner plans exactly when the predicate says recoverable.
TEST(RecoveryPlannerTest, ExhaustiveAgreesWithPredicate) {
  int plans = 0;
  for (const char* scheme_text : kSchemes) {
    const Scheme scheme = *Scheme::Parse(scheme_text);
    for (int n = 1; n <= 12; ++n) {
      if (!scheme.ValidateFor(n).ok()) continue;
      const Topology topo = *Topology::Uniform(n);
      const GroupLayout layout = *GroupLayout::Build(topo, scheme);
      RecoveryInput in;
      in.inventory = FullInventory(layout, 1, 5);
      in.new_num_nodes = n;
      std::vector<char> mask(n);
      for (uint32_t bits = 0; bits < (1u << n); ++bits) {
        in.failed_nodes.clear();
        for (int i = 0; i < n; ++i) {
          mask[i] = (bits >> i) & 1;
          if (mask[i]) in.failed_nodes.push_back(i);
        }
        const bool recoverable = IsRecoverable(layout, mask);
        const FailureAssessment a = AssessFailures(layout, in.failed_nodes);
        ASSERT_EQ(a.recoverable, recoverable);
        auto plan = PlanRecovery(topo, layout, in);
        const std::string ctx = std::string(scheme_text) + " n=" + std::to_string(n) +
                                " failed mask " + std::to_string(bits);
        ++plans;
        if (!recoverable) {
          ASSERT_FALSE(plan.ok()) << ctx;
          ASSERT_EQ(plan.status().code(), StatusCode::kUnrecoverable) << ctx;
          continue;
        }
        ASSERT_TRUE(plan.ok()) << ctx << ": " << plan.status().ToString();
        ASSERT_EQ(plan->version, 5u);
        for (const ShardSource& s : plan->shards) {
          const bool lost = mask[s.node];
          ASSERT_EQ(s.kind == SourceKind::kLocal, !lost) << ctx;
          ASSERT_NE(s.kind, SourceKind::kRemote) << ctx;
          ASSERT_EQ(a.shards[s.node].state, lost ? ShardState::kRebuildable : ShardState::kIntact);
        }
        CheckPlanUsesOnlyValidSources(layout, in, *plan, ctx);
      }
    }
  }
  EXPECT_GT(plans, 50000);
}

// Random corruption: the plan never reads an unsealed or corrupt item; with remote storage
// holding the version, a plan always exists.
TEST(RecoveryPlannerTest, RandomCorruptionNeverChosen) {
  std::mt19937_64 rng(42);
  for (const char* scheme_text : kSchemes) {
    const Topology topo = *Topology::Uniform(10, 2);
    const GroupLayout layout = *GroupLayout::Build(topo, *Scheme::Parse(scheme_text));
    for (int trial = 0; trial < 200; ++trial) {
      RecoveryInput in;
      in.inventory = FullInventory(layout, 2, 9);
      for (InventoryItem& it : in.inventory) {
        const uint64_t r = rng() % 10;
        if (r == 0) it.crc_ok = false;
        if (r == 1) it.sealed = false;
      }
      for (int i = 0; i < 10; ++i) {
        if (rng() % 8 == 0) in.failed_nodes.push_back(i);
      }
      in.new_num_nodes = 10;
      if (trial % 2) in.remote_versions = {9};
      auto plan = PlanRecovery(topo, layout, in);
      const std::string ctx = std::string(scheme_text) + " trial " + std::to_string(trial);
      if (trial % 2) {
        ASSERT_TRUE(plan.ok()) << ctx;
      }
      if (!plan.ok()) {
        EXPECT_EQ(plan.status().code(), StatusCode::kUnrecoverable);
        continue;
      }
      CheckPlanUsesOnlyValidSources(layout, in, *plan, ctx);
    }
  }
}

struct Fixture {
  Topology topo;
  GroupLayout layout;
  RecoveryInput in;
};

Fixture Make(int n, const char* scheme, int lanes = 1) {
  Topology topo = *Topology::Uniform(n, lanes);
  GroupLayout layout = *GroupLayout::Build(topo, *Scheme::Parse(scheme));
  RecoveryInput in;
  in.new_num_nodes = n;
  return {topo, layout, in};
}

void Mark(std::vector<InventoryItem>* items, int node, ItemKind kind, int owner, bool crc_ok,
          bool sealed) {
  for (InventoryItem& it : *items) {
    if (it.node == node && it.kind == kind && (owner < 0 || it.owner == owner)) {
      it.crc_ok = crc_ok;
      it.sealed = sealed;
    }
  }
}

TEST(RecoveryPlannerTest, NewerIncompleteVersionSkippedForOlderComplete) {
  Fixture f = Make(4, "replica:2");
  f.in.inventory = FullInventory(f.layout, 1, 10);
  auto v20 = FullInventory(f.layout, 1, 20);
  Mark(&v20, 2, ItemKind::kShard, -1, true, false);  // in flight: unsealed on nodes 2, 3
  Mark(&v20, 3, ItemKind::kReplica, -1, true, false);
  f.in.inventory.insert(f.in.inventory.end(), v20.begin(), v20.end());
  f.in.failed_nodes = {3};  // v20's shard of node 2 now has no copy
  auto plan = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->version, 10u);
  EXPECT_EQ(plan->skipped_versions, (std::vector<uint64_t>{20}));
  EXPECT_EQ(plan->shards[3].kind, SourceKind::kReplica);
  EXPECT_EQ(plan->shards[3].from_node, 2);
  // Without the failure, v20 is still incomplete (node 2's shard unsealed, replica on 3
  // unsealed): 10 is chosen; once the replica on 3 is sealed, 20 wins.
  f.in.failed_nodes = {};
  EXPECT_EQ(PlanRecovery(f.topo, f.layout, f.in)->version, 10u);
  for (InventoryItem& it : f.in.inventory) {
    if (it.version == 20 && it.node == 3) it.sealed = true;
  }
  auto newer = PlanRecovery(f.topo, f.layout, f.in);
  EXPECT_EQ(newer->version, 20u);
  EXPECT_EQ(newer->shards[2].kind, SourceKind::kReplica);
}

TEST(RecoveryPlannerTest, CorruptCopyNeverChosen) {
  Fixture f = Make(3, "replica:3");
  f.in.inventory = FullInventory(f.layout, 1, 7);
  f.in.failed_nodes = {0};
  Mark(&f.in.inventory, 1, ItemKind::kReplica, 0, /*crc_ok=*/false, true);
  auto plan = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->shards[0].kind, SourceKind::kReplica);
  EXPECT_EQ(plan->shards[0].from_node, 2);
  // The corrupt copy is listed for re-protection.
  bool listed = false;
  for (const ReprotectItem& r : plan->reprotect) {
    listed = listed || (r.node == 1 && r.kind == ItemKind::kReplica && r.owner == 0);
  }
  EXPECT_TRUE(listed);
  Mark(&f.in.inventory, 2, ItemKind::kReplica, 0, false, true);
  auto none = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnrecoverable);
  EXPECT_NE(none.status().message().find("nothing restorable"), std::string::npos);
  EXPECT_NE(none.status().message().find("node 0 lane 0"), std::string::npos);
}

TEST(RecoveryPlannerTest, CorruptParityForcesOtherRowsOrRemote) {
  Fixture f = Make(4, "rs:2+2");
  f.in.inventory = FullInventory(f.layout, 1, 3);
  f.in.failed_nodes = {0};
  // Node 0's pieces are in stripes (0-2-i) mod 4 = 2 and 1. Corrupt one parity row of
  // stripe 2 (held by node 2): the other parity row still serves.
  for (InventoryItem& it : f.in.inventory) {
    if (it.kind == ItemKind::kParity && it.stripe == 2 && it.row == 0) it.crc_ok = false;
  }
  auto plan = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->shards[0].kind, SourceKind::kDecode);
  CheckPlanUsesOnlyValidSources(f.layout, f.in, *plan, "rs:2+2");
  // Lose node 1 too: stripe 2 keeps only the parity row on node 3 (< K' = 2 rows), so
  // nodes 0 and 1 cannot be decoded from memory.
  f.in.failed_nodes = {0, 1};
  EXPECT_EQ(PlanRecovery(f.topo, f.layout, f.in).status().code(), StatusCode::kUnrecoverable);
  // With the version in remote storage, exactly the undecodable shards come from there.
  f.in.remote_versions = {3};
  plan = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->version, 3u);
  EXPECT_EQ(plan->shards[0].kind, SourceKind::kRemote);
  EXPECT_EQ(plan->shards[1].kind, SourceKind::kRemote);
  EXPECT_EQ(plan->shards[2].kind, SourceKind::kLocal);
  EXPECT_FALSE(plan->memory_cannot_serve);
  // Without the corrupt row both lost nodes are decoded again.
  for (InventoryItem& it : f.in.inventory) it.crc_ok = true;
  plan = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->shards[0].kind, SourceKind::kDecode);
  EXPECT_EQ(plan->shards[1].kind, SourceKind::kDecode);
  CheckPlanUsesOnlyValidSources(f.layout, f.in, *plan, "rs:2+2 two lost");
}

TEST(RecoveryPlannerTest, RemoteOnlyWhenMemoryCannotServe) {
  Fixture f = Make(8, "replica:2", 2);
  f.in.inventory = FullInventory(f.layout, 2, 10);
  f.in.remote_versions = {10};
  f.in.failed_nodes = {1};
  auto plan = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(plan.ok());
  for (const ShardSource& s : plan->shards) EXPECT_NE(s.kind, SourceKind::kRemote);
  // Whole pair {0,1} lost: only its shards come from remote, at the same version.
  f.in.failed_nodes = {0, 1};
  plan = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->version, 10u);
  for (const ShardSource& s : plan->shards) {
    EXPECT_EQ(s.kind == SourceKind::kRemote, s.node < 2) << s.node;
  }
  EXPECT_FALSE(plan->memory_cannot_serve);
  // Nothing in memory: the newest complete remote version.
  f.in.inventory.clear();
  f.in.remote_versions = {5, 8};
  plan = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->version, 8u);
  EXPECT_TRUE(plan->memory_cannot_serve);
  EXPECT_NE(plan->Summary().find("memory cannot serve: newest remote version 8"),
            std::string::npos);
  // Remote strictly newer than anything memory can rebuild: the newer version wins.
  f.in.inventory = FullInventory(f.layout, 2, 6);
  f.in.failed_nodes = {};
  plan = PlanRecovery(f.topo, f.layout, f.in);
  EXPECT_EQ(plan->version, 8u);
  EXPECT_TRUE(plan->memory_cannot_serve);
  // Memory at the same version as remote: memory first.
  f.in.remote_versions = {6};
  plan = PlanRecovery(f.topo, f.layout, f.in);
  EXPECT_EQ(plan->version, 6u);
  EXPECT_FALSE(plan->memory_cannot_serve);
  // Nothing anywhere.
  f.in.inventory.clear();
  f.in.remote_versions.clear();
  EXPECT_EQ(PlanRecovery(f.topo, f.layout, f.in).status().code(), StatusCode::kUnrecoverable);
}

TEST(RecoveryPlannerTest, ReadsAreBalancedOverReplicas) {
  // replica:4 on 4 nodes, 2 lanes: nodes 0 and 1 lost; their 4 shards have copies on 2 and
  // 3. Balanced: each serves 2 shards.
  Fixture f = Make(4, "replica:4", 2);
  f.in.inventory = FullInventory(f.layout, 2, 1, 1000);
  f.in.failed_nodes = {0, 1};
  auto plan = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->read_bytes_per_node[2], 2000u);
  EXPECT_EQ(plan->read_bytes_per_node[3], 2000u);
  EXPECT_EQ(plan->max_read_bytes, 2000u);
  // Ring replica:3 on 6 nodes, node 0 lost on 3 lanes: copies on 1 and 2, spread 2:1 at most.
  Fixture r = Make(6, "replica:3:ring", 3);
  r.in.inventory = FullInventory(r.layout, 3, 1, 1000);
  r.in.failed_nodes = {0};
  plan = PlanRecovery(r.topo, r.layout, r.in);
  EXPECT_EQ(plan->max_read_bytes, 2000u);
  // Erasure: rows are spread; rs:2+2 with one node lost reads 2 rows per stripe from 3 nodes.
  Fixture e = Make(4, "rs:2+2");
  e.in.inventory = FullInventory(e.layout, 1, 1, 1000);
  e.in.failed_nodes = {0};
  plan = PlanRecovery(e.topo, e.layout, e.in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->decodes.size(), 2u);
  EXPECT_LE(plan->max_read_bytes, 1000u);  // 4 rows of 500 bytes over 3 nodes: none reads 3
}

TEST(RecoveryPlannerTest, DeterministicWhateverTheInventoryOrder) {
  Fixture f = Make(12, "rs:3+2", 2);
  f.in.inventory = FullInventory(f.layout, 2, 4);
  auto older = FullInventory(f.layout, 2, 3);
  f.in.inventory.insert(f.in.inventory.end(), older.begin(), older.end());
  f.in.failed_nodes = {1, 3, 7};
  f.in.remote_versions = {2};
  auto a = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(a.ok());
  std::mt19937_64 rng(5);
  std::shuffle(f.in.inventory.begin(), f.in.inventory.end(), rng);
  f.in.failed_nodes = {7, 3, 1, 3};
  auto b = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->ToJson(), b->ToJson());
  EXPECT_EQ(a->version, 4u);
  const std::string json = a->ToJson();
  // Parsed back, the JSON carries the plan's values.
  const nlohmann::json parsed = nlohmann::json::parse(json);
  EXPECT_EQ(parsed.at("version"), 4);
  EXPECT_EQ(parsed.at("failed_nodes"), nlohmann::json({1, 3, 7}));
  EXPECT_EQ(parsed.at("scheme"), "rs:3+2");
  EXPECT_EQ(parsed.at("nodes"), 12);
  EXPECT_EQ(parsed.at("lanes"), 2);
  ASSERT_EQ(parsed.at("shards").size(), a->shards.size());
  int decode_shards = 0;
  for (size_t i = 0; i < a->shards.size(); ++i) {
    const nlohmann::json& s = parsed["shards"][i];
    EXPECT_EQ(s.at("node"), a->shards[i].node);
    EXPECT_EQ(s.at("source"), SourceKindName(a->shards[i].kind));
    EXPECT_EQ(s.at("read_nodes").get<std::vector<int>>(), a->shards[i].read_nodes);
    if (a->shards[i].kind == SourceKind::kDecode) {
      ++decode_shards;
      EXPECT_EQ(s.at("decodes").get<std::vector<int>>(), a->shards[i].decodes);
    }
  }
  EXPECT_GT(decode_shards, 0);
  ASSERT_EQ(parsed.at("decodes").size(), a->decodes.size());
  EXPECT_EQ(parsed["decodes"][0].at("inputs").size(), a->decodes[0].inputs.size());
  ASSERT_EQ(parsed.at("reprotect").size(), a->reprotect.size());
  bool parity = false;
  for (const nlohmann::json& r : parsed["reprotect"]) parity |= r.at("kind") == "parity";
  EXPECT_TRUE(parity);
  EXPECT_EQ(parsed.at("max_read_bytes"), a->max_read_bytes);
  EXPECT_EQ(parsed.at("read_bytes_per_node").get<std::vector<uint64_t>>(), a->read_bytes_per_node);
}

TEST(RecoveryPlannerTest, ReprotectListsItemsHeldByLostNodes) {
  Fixture f = Make(6, "xor:2");
  f.in.inventory = FullInventory(f.layout, 1, 1);
  f.in.failed_nodes = {4};
  auto plan = PlanRecovery(f.topo, f.layout, f.in);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->reprotect.size(), 1u);  // node 4 held one parity row of group 1
  EXPECT_EQ(plan->reprotect[0].node, 4);
  EXPECT_EQ(plan->reprotect[0].kind, ItemKind::kParity);
  EXPECT_EQ(plan->reprotect[0].group, 1);
  EXPECT_EQ(f.layout.ParityHolder(1, plan->reprotect[0].stripe, plan->reprotect[0].row), 4);
  Fixture r = Make(4, "replica:2");
  r.in.inventory = FullInventory(r.layout, 1, 1);
  r.in.failed_nodes = {1};
  plan = PlanRecovery(r.topo, r.layout, r.in);
  ASSERT_EQ(plan->reprotect.size(), 1u);
  EXPECT_EQ(plan->reprotect[0].node, 1);
  EXPECT_EQ(plan->reprotect[0].owner, 0);
  EXPECT_EQ(plan->reprotect[0].bytes, 1200u);
}

TEST(RecoveryPlannerTest, ElasticAndBadInput) {
  Fixture f = Make(16, "replica:2");
  f.in.inventory = FullInventory(f.layout, 1, 1);
  f.in.new_num_nodes = 15;
  auto plan = PlanRecovery(f.topo, f.layout, f.in);
  EXPECT_EQ(plan.status().code(), StatusCode::kElasticRestoreNeeded);
  EXPECT_NE(plan.status().message().find("elastic restore needed"), std::string::npos);
  f.in.new_num_nodes = 16;
  f.in.inventory.push_back({3, 0, 1, ItemKind::kReplica, 9, -1, -1, 10, true, true});
  plan = PlanRecovery(f.topo, f.layout, f.in);
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("places no replica of node 9"), std::string::npos)
      << plan.status().message();
  f.in.inventory.back() = {3, 4, 1, ItemKind::kShard, 3, -1, -1, 10, true, true};
  EXPECT_EQ(PlanRecovery(f.topo, f.layout, f.in).status().code(), StatusCode::kInvalidArgument);
  f.in.inventory.pop_back();
  f.in.failed_nodes = {16};
  EXPECT_EQ(PlanRecovery(f.topo, f.layout, f.in).status().code(), StatusCode::kInvalidArgument);
  auto mixed = *Topology::FromNodes({{"a", 1}, {"b", 2}});
  EXPECT_EQ(PlanRecovery(mixed, *Scheme::Parse("replica:2"), RecoveryInput{{}, {}, {}, 2})
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace memento::placement
