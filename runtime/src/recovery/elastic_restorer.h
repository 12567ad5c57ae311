// ElasticRestorer: one collective elastic Restore, on a job relaunched on
// another number of nodes or ranks per node than its surviving node stores
// were written for (Config::elastic; docs/architecture.md §6.5). Steps:
//
//  1. Inventory. Every rank attaches, read-only, the stores of the old
//     topology it serves (set aside by Prepare), and reports of each its old
//     (node, lane), the job catalog it records (scheme, topology, the entries
//     of every rank whose bytes it holds) and every item of its sealed slots,
//     with the complete remote versions it sees (one allgather). The newest
//     lineage's versions are kept, as in a plain restore; an old node none of
//     whose stores reports one is lost. With no store anywhere, the old job is
//     the newest complete remote version's ranks (one per node).
//  2. Plan. placement::PlanRecovery over the old topology (where each old
//     shard's bytes are: its own store, a replica, a decode, remote), then
//     placement::PlanElastic (which old slices make up every new slice, and
//     from which copy). Old ranks whose entries no surviving store records
//     are described by their remote files.
//  3. Verify. Every rank checks the crc32c of each region it will read (the
//     pieces it serves, its decode inputs, what it reads on its own node);
//     the failures are allgathered, marked bad and the restore plans again.
//  4. Decode. Lost shards that a new slice needs are rebuilt once, on their
//     decode host, by partial-product reduce chains over the old rows
//     (reduce_chain.h), and checked entry by entry against the owner's seals.
//  5. Pieces. Every new rank copies the runs of its pieces (ForEachRun) that
//     lie on its own node straight from the old stores' shared memory, reads
//     its remote pieces from the old ranks' files, and receives the others
//     from their serving ranks: one stream per (server, receiver) pair, in
//     chunks with a crc32c each; every outgoing stream runs on its own thread
//     and the incoming ones are received in rank order on the calling thread.
//  6. Agree (one allgather): every rank assembled its slices, or the restore
//     fails everywhere and the set-aside stores stay for the next attempt.
//
// The caller (Checkpointer) then protects the restored version under the new
// topology and releases the set-aside stores once it commits.
//
// Thread-safety: one Run per restorer, on the application thread, while no
// version is in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memento/common/status.h"
#include "memento/placement/elastic_plan.h"
#include "memento/placement/recovery_planner.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/remote_store.h"
#include "memento/runtime/restore_report.h"
#include "memento/runtime/stage.h"
#include "memento/runtime/transport.h"
#include "protect/entry_seals.h"
#include "protect/protection_layout.h"
#include "recovery/inventory.h"
#include "recovery/reprotector.h"
#include "snapshot/registered_entry.h"
#include "snapshot/staged_copy.h"
#include "transport/wire.h"

namespace memento::runtime {

class ElasticRestorer {
 public:
  // Everything is borrowed and must outlive the restorer.
  struct Parts {
    Transport* transport = nullptr;
    const std::vector<RegisteredEntry>* entries = nullptr;  // this rank's, new
    const ProtectionLayout* layout = nullptr;               // the new topology
    const std::vector<placement::RankCatalog>* new_catalogs = nullptr;  // node-major
    RemoteStore* remote = nullptr;  // may be null
    std::vector<std::string> aside;  // the old stores this rank serves
    uint64_t chunk_bytes = 0;
    StageHook hook;  // may be empty
    // Set to the lineage of the restored version.
    uint64_t* lineage = nullptr;
    // The pinned buffer pairs the assembled slices of device entries go
    // through to the device (copied and hashed in one pass).
    StagedCopierPool* copiers = nullptr;
  };
  explicit ElasticRestorer(Parts parts);

  // Collective. OK when every rank's registered buffers hold the restored
  // version's slices, bit-exact. When no version can be rebuilt: NotFound
  // "nothing to restore" if the newest run committed none, else
  // Unrecoverable; InvalidArgument naming the entry when the new
  // registrations do not fit the checkpoint (the old stores are untouched).
  Result<RestoreReport> Run();

 private:
  // One old store this rank attached.
  struct OldStore {
    std::string name;
    NodeStore store;
    int node = -1;  // old node index and lane
    int lane = 0;
    std::optional<ProtectionLayout> layout;  // the old layout as that old rank
  };
  // What the job knows about one old (node, lane).
  struct OldRank {
    int server = -1;   // new world rank that attached its store, -1: none survives
    std::string name;  // its set-aside segment (on the server's node)
    bool has_catalog = false;
    placement::RankCatalog catalog;
  };

  // Attaches the set-aside store `name` with the old layout its catalog gives.
  Result<std::unique_ptr<OldStore>> OpenOld(const std::string& name);
  Status OpenAside();                                    // 1
  Status TakeInventory();                                // 1
  // One store another rank (`rank`) reports: the old topology, who serves it,
  // the catalogs it records.
  Status AbsorbStore(int rank, wire::ElasticStoreRecord* store);
  // The newest run's items and remote versions, and the old nodes lost.
  Status KeepNewestLineage(const std::vector<wire::ElasticInventory>& theirs,
                           const LineageChoice& choice);
  Status AdoptTopology(const wire::JobCatalog& catalog);
  Status RemoteOnlyTopology();
  Result<std::pair<placement::RecoveryPlan, placement::ElasticPlan>> PlanVerified();  // 2 + 3
  Status FillRemoteCatalogs(const placement::RecoveryPlan& plan);
  Result<bool> VerifyReads(const placement::RecoveryPlan& plan,
                           const placement::ElasticPlan& eplan);
  Status GatherSeals();                                  // 4
  Status RunDecodes();                                   // 4
  Status MovePieces();                                   // 5
  Status SendStream(int to, const std::vector<int>& pieces);
  Status ReceiveStream(int from, const std::vector<int>& pieces);
  Status CopyLocalAndRemote();
  Status Finish(const Status& local);                    // 6

  // The bytes of the old entry a piece reads, on the rank that serves it.
  Result<const uint8_t*> SourceOf(const placement::ElasticPiece& piece);
  // This rank's old store of (old node, old lane), or one attached on demand
  // on its node; null when not there.
  OldStore* StoreOf(int old_node, int old_lane);
  // Byte offset of `entry` in old rank (node, lane)'s shard.
  uint64_t EntryOffset(int node, int lane, int entry) const;
  int NewRank(int node, int lane) const { return parts_.layout->rank_of(node, lane); }
  const OldRank& Old(int node, int lane) const {
    return old_ranks_.at(static_cast<size_t>(node) * old_lanes_ + lane);
  }
  Status RunHook(Stage stage, uint64_t version) const;
  static std::string OldRankName(int node, int lane);  // for errors

  const Parts parts_;
  const ProtectionLayout& pl_;
  RestoreReport report_;

  // The old job.
  std::string old_scheme_;
  int old_nodes_ = 0;
  int old_lanes_ = 0;
  std::optional<ProtectionLayout> old_pl_;  // the old topology, as its rank 0
  std::vector<OldRank> old_ranks_;          // node-major
  std::vector<int> old_node_of_new_;        // per new node
  std::vector<std::unique_ptr<OldStore>> mine_;   // the stores this rank serves
  std::vector<std::unique_ptr<OldStore>> peers_;  // attached on demand (same node)
  placement::RecoveryInput input_;
  uint64_t lineage_ = 0;
  // Some old store or the remote tier holds a committed version of lineage_.
  bool committed_seen_ = false;

  // The plan and what it needs.
  placement::RecoveryPlan plan_;
  placement::ElasticPlan eplan_;
  SealsByOwner seals_of_;
  std::map<std::pair<int, int>, std::vector<uint8_t>> decoded_;  // old (node, lane) -> shard
  std::vector<std::vector<uint8_t>> staging_;  // device entries: assembled on the host first
  std::vector<uint8_t*> dst_;                  // where each entry is assembled
  // Per piece (flattened over every target's entries, in plan order): its
  // target rank, entry and serving rank (the target itself for local and
  // remote pieces).
  struct PieceRef {
    int target = -1;
    int entry = -1;
    const placement::ElasticPiece* piece = nullptr;
    int server = -1;
    size_t catalog = 0;  // the target's index in new_catalogs
  };
  std::vector<PieceRef> pieces_;
  std::atomic<uint64_t> sent_{0};  // added to by every sending thread
  uint64_t received_ = 0;
};

}  // namespace memento::runtime
