// The recovery planner: a pure, deterministic function from what survives to a plan.
//
// Rules (docs/architecture.md §6):
//  * Only items that are sealed && crc_ok, held by a node that did not fail, count. A
//    copy marked corrupt is never chosen.
//  * One version for every (node, lane) — never a mix. Candidate versions are those held
//    in memory or complete in remote storage, newest first; the first one for which every
//    shard has a source wins. Newer versions that cannot be rebuilt are skipped
//    (RecoveryPlan::skipped_versions), whichever tier they are in.
//  * Per shard, memory before remote: local copy, else a replica, else a decode; remote
//    storage (at that same version) only for shards memory cannot rebuild. When remote
//    holds a strictly newer complete version than any memory can rebuild, the newer
//    version wins and every shard comes from remote (memory_cannot_serve).
//  * Among valid sources, reads are balanced: replicas and decode rows are picked greedily
//    to keep the bytes served by the busiest node least (ties: lower node index).
//  * Replacement nodes take the failed nodes' indices. A different node count is
//    ElasticRestoreNeeded ("elastic restore needed"). No version restorable at all is
//    Unrecoverable ("nothing restorable").
//
// Thread-safety: pure. Cost: O(V * (I + N*L*(M+K))) for V candidate versions, I items.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "memento/common/status.h"
#include "memento/placement/group_layout.h"
#include "memento/placement/placement_map.h"
#include "memento/placement/recovery_plan.h"
#include "memento/placement/scheme.h"
#include "memento/placement/topology.h"

namespace memento::placement {

// One item that a node store reports (one allgather entry).
struct InventoryItem {
  int node = -1;         // holder index
  int lane = 0;          // local rank index on the holder (= lane of the shard protected)
  uint64_t version = 0;  // checkpoint version (training step)
  ItemKind kind = ItemKind::kShard;
  int owner = -1;   // kShard: == node; kReplica: whose shard; kParity: ignored
  int stripe = -1;  // kParity: stripe of the holder's group
  int row = -1;     // kParity: parity row 0..M-1
  uint64_t bytes = 0;
  bool sealed = false;
  bool crc_ok = false;
};

struct RecoveryInput {
  std::vector<InventoryItem> inventory;
  std::set<uint64_t> remote_versions;  // versions complete in remote storage
  std::vector<int> failed_nodes;       // indices whose memory is gone
  int new_num_nodes = 0;               // nodes the job runs on now
};

// Plans the restore. Errors: InvalidArgument (an item that does not fit the layout — the
// message names it — or unequal ranks per node), ElasticRestoreNeeded, Unrecoverable.
Result<RecoveryPlan> PlanRecovery(const Topology& topology, const Scheme& scheme,
                                  const RecoveryInput& input);
// As above with a prebuilt layout (must be for `topology`).
Result<RecoveryPlan> PlanRecovery(const Topology& topology, const GroupLayout& layout,
                                  const RecoveryInput& input);

}  // namespace memento::placement
