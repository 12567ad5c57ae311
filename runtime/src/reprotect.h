// Minimal re-protect after a restore (DESIGN §6 step 3): instead of
// re-snapshotting and re-protecting the whole version, rebuild only what the
// lost nodes held, so that the restored version is fully protected again.
//
// Items (RecoveryPlan::reprotect) are rebuilt as reduce chains
// (reduce_chain.h) into their holder:
//   - a replica of owner O held by H: a one-term chain (coefficient 1) from
//     O, which now has its shard (its slot, or the restored shard of a lost
//     owner), to H;
//   - parity row t of stripe s held by H: a chain over the K' data rows of
//     the stripe, each multiplied by the generator coefficient (t, r), into H
//     (partial products reduced at the data holders, P bytes into H).
// A lost node's rank writes its restored shard and everything it holds into
// a fresh slot of its store, seals it, and the version is committed by one
// AllTrue (Checkpointer::Impl::ReprotectMinimal).
//
// Minimal re-protect is possible when the plan restores from memory and every
// shard that is not local and every re-protect item belongs to a lost node
// (one that reported nothing, so it writes a fresh slot). Otherwise (a
// surviving node's sealed slot would have to be rewritten: a corrupt copy or
// shard on a survivor; or shards from the remote tier) the engine falls back
// to the full re-protect (Reseed).
#pragma once

#include <vector>

#include "memento/common/status.h"
#include "memento/placement/recovery_plan.h"
#include "protection_layout.h"
#include "reduce_chain.h"

namespace memento::runtime {

// Whether the minimal re-protect applies to `plan` (see above). The same
// answer on every rank (a function of the plan only).
bool MinimalReprotectPossible(const placement::RecoveryPlan& plan);

// What chain i of BuildReprotectChains rebuilds: plan.reprotect[item]. For a
// parity chain a term's row_id is its data row r (= piece r of the term
// rank's shard, `piece_bytes` each); for a replica chain row_id is -1 (the
// whole shard).
struct ReprotectChainInfo {
  int item = -1;
  uint64_t piece_bytes = 0;
};

// Chains for every re-protect item with a non-empty region.
Status BuildReprotectChains(const placement::RecoveryPlan& plan, const ProtectionLayout& layout,
                            std::vector<ReduceChain>* chains,
                            std::vector<ReprotectChainInfo>* info);

}  // namespace memento::runtime
