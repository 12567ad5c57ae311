// The restore inventory, shared by the plain restore (recovery_executor.h)
// and the elastic one (elastic_restorer.h): what a node store holds, from its
// seal records alone, and which run's versions a restore considers.
//
// Thread-safety: pure functions (StoreItems reads the store's headers).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "memento/runtime/node_store.h"
#include "memento/runtime/transport.h"
#include "protect/entry_seals.h"
#include "protect/protection_layout.h"
#include "transport/wire.h"

namespace memento::runtime {

// Every item of every sealed slot of `store`, written by the rank that
// `layout` describes: its shard (ok when every entry's seal record is) and
// each region it holds for peers, with the slot's lineage. Problems of seal
// records are appended to `notes`. No payload is hashed.
wire::Inventory StoreItems(const NodeStore& store, const ProtectionLayout& layout,
                           std::vector<std::string>* notes);

// Which run a restore considers: the remote (version, lineage) pairs every
// rank sees complete, and the newest lineage among them and every item
// (lineage ids grow with the time a run started). `remote_of_rank`: each
// rank's remote versions; `items`: every inventory whose items count.
// A remote version some rank sees complete and another does not (a listing
// that failed on one rank, or MEMENTO_REMOTE naming another directory there)
// is not a candidate; when it is newer than every version all ranks see and
// every item in memory, `disputed` says so: restoring anything older, or
// nothing (a fresh start that then prunes the run's versions away), would
// lose the run's progress without a word.
struct LineageChoice {
  std::set<std::pair<uint64_t, uint64_t>> remote;
  std::optional<uint64_t> newest;  // none: nothing anywhere
  std::string disputed;            // empty: nothing newer is disputed
};
LineageChoice ChooseNewestLineage(const std::vector<const wire::Inventory*>& remote_of_rank,
                                  const std::vector<const wire::Inventory*>& items);
// Unavailable naming `choice.disputed` (with this rank's own listing failure
// among `notes`, if any); Ok when nothing newer is disputed. Every rank
// decides alike: the choice is made from gathered inventories.
Status CheckRemoteListingsAgree(const LineageChoice& choice, const std::vector<std::string>& notes);

// The planner found no version to restore (`why`, and the restore's notes):
// Unrecoverable when the chosen run committed one (`committed_seen`: its
// committed versions are lost, which a job must not take for a fresh start),
// else NotFound "nothing to restore".
Status NothingRestorable(bool committed_seen, const std::string& why,
                         const std::vector<std::string>& notes);

// Appends to `records` a seals record (as lane `lane`) for every seals region
// `layout` keeps in `slot` of `store` that verifies: the entry seals of the
// owners whose bytes this store protects.
void AppendHeldSeals(const NodeStore& store, int slot, const ProtectionLayout& layout, int lane,
                     std::vector<uint8_t>* records);

// Collective: one allgather of every rank's seals records; the seals of every
// owner some rank vouched for (undecodable records are skipped).
Result<SealsByOwner> ExchangeSeals(Transport* transport, const std::vector<uint8_t>& mine);
// The same from records already gathered (one per rank).
Result<SealsByOwner> DecodeSeals(const std::vector<std::vector<uint8_t>>& all);

}  // namespace memento::runtime
