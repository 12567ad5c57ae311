// Recoverability predicate: given the failed nodes, which shards are lost for good,
// which can be rebuilt, and from which nodes. Assumes every copy on a surviving node is
// intact (corruption is the planner's business, recovery_planner.h).
//
//  * unprotected: a failed node's shard is lost.
//  * replica group of g nodes, M copies: the shard of position p is rebuildable iff one
//    of positions p..p+M-1 (mod g) survives (a copy on a surviving holder).
//  * erasure group, M parity: every shard is rebuildable iff at most M of its nodes
//    failed (each stripe then keeps >= K' of its K'+M rows).
// The layout applies to every lane alike, so the answer holds for every lane.
//
// Thread-safety: pure functions. Cost: O(N * M).
#pragma once

#include <vector>

#include "memento/placement/group_layout.h"

namespace memento::placement {

enum class ShardState {
  kIntact,       // the owner survived: its own copy is local
  kRebuildable,  // the owner failed; a replica or a decode rebuilds it
  kLost,         // the owner failed and the scheme cannot rebuild it
};
const char* ShardStateName(ShardState state);  // "intact", "rebuildable", "lost"

struct ShardFate {
  int owner = -1;
  ShardState state = ShardState::kIntact;
  // kRebuildable: surviving replica holders (any one suffices), or the surviving members
  // of the erasure group (a decode reads K' rows from them).
  std::vector<int> sources;
};

struct FailureAssessment {
  bool recoverable = true;        // no shard is kLost
  std::vector<ShardFate> shards;  // one per node, by owner index
  std::vector<int> lost;          // owners whose shard is kLost
  std::vector<int> rebuildable;   // owners whose shard is kRebuildable
};

// `failed` lists node indices (duplicates ignored); out-of-range indices are bugs (throw).
FailureAssessment AssessFailures(const GroupLayout& layout, const std::vector<int>& failed);

// Fast form for enumeration and Monte Carlo: failed_mask[n] != 0 when node n failed.
bool IsRecoverable(const GroupLayout& layout, const std::vector<char>& failed_mask);

}  // namespace memento::placement
