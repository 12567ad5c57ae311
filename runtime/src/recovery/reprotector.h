// Reprotector: makes a restored version fully protected again, in one of two
// ways; either may run after Restore returned (Config::background_reprotect:
// the minimal one as a task on the commit thread, the full one as a version
// in flight like a Save's).
//
// Minimal: rebuild only what the lost nodes held. Items
// (RecoveryPlan::reprotect) are rebuilt as reduce chains (reduce_chain.h)
// into their holder:
//   - a replica of owner O held by H: a one-term chain (coefficient 1) from
//     O, which now has its shard (its slot, or the restored shard of a lost
//     owner), to H;
//   - parity row t of stripe s held by H: a chain over the K' data rows of
//     the stripe, each multiplied by the generator coefficient (t, r), into H
//     (partial products reduced at the data holders, P bytes into H).
// A lost node's rank writes its restored shard and everything it holds into
// a fresh slot of its store and seals it; the caller agrees (AllTrue) and
// commits. Possible when the plan restores from memory and every shard that
// is not local and every re-protect item belongs to a lost node (one that
// reported nothing, so it writes a fresh slot).
//
// Full: the restored buffers are snapshotted again as the same version and
// protected like any Save (the engine's snapshot path, given as `resnapshot`),
// and committed. A copy of the version this store already holds stays the
// committed slot meanwhile, so a failure during the re-protect still leaves
// the version in memory; the old copy goes once the new one is committed.
#pragma once

#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "memento/common/status.h"
#include "memento/placement/recovery_plan.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/stage.h"
#include "memento/runtime/transport.h"
#include "protect/entry_seals.h"
#include "protect/protect_stage.h"
#include "protect/protection_layout.h"
#include "protect/reduce_chain.h"
#include "recovery/shard_io.h"
#include "store/slot_allocator.h"

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

class Reprotector {
 public:
  // Everything is borrowed and must outlive the Reprotector.
  struct Parts {
    Transport* transport = nullptr;
    NodeStore* store = nullptr;
    const ProtectionLayout* layout = nullptr;
    const ShardIo* io = nullptr;
    SlotAllocator* slots = nullptr;
    uint64_t chunk_bytes = 0;
    // Snapshots the registered buffers as `version` and, unless `background`,
    // waits for its commit.
    std::function<Status(uint64_t version, bool background)> resnapshot;
    const ProtectStage* protect = nullptr;  // for the bytes a full re-protect moved; may be null
    // The lineage of the version being re-protected (read when it runs,
    // after the restore has chosen it); must not be null.
    const uint64_t* lineage = nullptr;
  };
  explicit Reprotector(Parts parts);

  // Collective (every rank calls it). `landed`: a lost node's rank's shard as
  // rebuilt, landed in a slot of its store being written with plan.version
  // (its entries sealed), else null. `seals_of`: every owner's entry seals.
  // On success *slot is this rank's slot of plan.version (sealed, not yet
  // committed); on failure a lost node's slot is invalidated.
  Status Minimal(const placement::RecoveryPlan& plan, const ShardLanding* landed,
                 const SealsByOwner& seals_of, int tag_base, ReduceBytes* bytes, int* slot);

  // Collective. Re-snapshots `version` and, unless `background`, waits for
  // its commit; adds the protect bytes.
  Status Full(uint64_t version, ReduceBytes* bytes, bool background = false);

 private:
  // A lost node's rank: (*into)[c] = the held region of `slot` that chain c
  // rebuilds (null for chains ending elsewhere), (*chain_of)[i] = the chain
  // that rebuilds held region i (-1 for an empty one); an error when a held
  // region has no chain or a chain of another length.
  Status HeldTargets(const placement::RecoveryPlan& plan, int slot,
                     const std::vector<ReduceChain>& chains,
                     const std::vector<ReprotectChainInfo>& info, std::vector<uint8_t*>* into,
                     std::vector<int>* chain_of);
  // Seals every held region of `slot` with the crc32c its chain's pieces
  // combine to (checked as they landed: no second pass over the bytes).
  Status SealHeld(int slot, const std::vector<int>& chain_of,
                  const std::vector<uint32_t>& chain_crc);
  Status WriteSeals(int slot, const SealsByOwner& seals_of);

  const Parts parts_;
};

}  // namespace memento::runtime
