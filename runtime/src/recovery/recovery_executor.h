// RecoveryExecutor: one collective Restore, for every scheme (the design
// notes in runtime/README.md, "Restore"). Named steps, in order:
//
//  1. Inventory. Every rank reports every item of every sealed slot (its
//     shard, everything it holds for peers) from the seal records alone
//     (length + crc32c, no payload hashing) and allgathers them with every
//     complete remote version it sees; those all ranks see are candidates.
//     Every version carries the lineage (run) that wrote it; only the newest
//     lineage's versions are kept (Checkpointer: lineages), and a node none of
//     whose ranks reports one of them lost its memory.
//  2. Plan. placement::PlanRecovery (pure; every rank computes the same plan).
//     Nothing is hashed before the transfer: every byte the plan reads is
//     checked as it is used (a copy as it leaves the slot, a replica as it
//     arrives, a rebuilt shard against its owner's entry seals), so a
//     restore reads each byte once and the transfer starts at once.
//  3. Transfer. Replica sources become transfers (holder -> owner, the whole
//     shard) with a PayloadHeader (length, crc32c) then the payload in chunk
//     pieces, up to 4 in flight and driven by one thread a side (a piece's
//     completion latency overlaps the next ones; no other thread polls
//     beside it); every outgoing transfer runs on a thread of its own and
//     the incoming ones are received in list order on the calling thread,
//     so no ordering between ranks can deadlock. Decodes
//     run as partial-product reduce chains (partial_decode.h). A copied or
//     decoded shard lands where it stays (ShardLanding: a lost node's rank
//     receives straight into the fresh slot the re-protect seals) and is
//     checked entry by entry against its owner's entry seals (one allgather
//     collects them from any holder) as it is copied into the buffers, in
//     the same pass; an attempt counts only when every entry matches, and
//     only then is the slot sealed. Local shards are copied from the slot
//     (crc32c verified the same way), remote ones read from the remote tier.
//  4. Agree (allgather of each rank's outcome). When every failure is an
//     end-to-end mismatch (a rebuilt shard against its seals, a replica or a
//     survivor's own copy against its region crc32c), the copies behind it
//     are marked bad in the inventory and the restore goes back to step 2:
//     a corrupt copy is used at most once. When the plan read from a remote
//     version, that version stops being a candidate and the restore goes
//     back to step 2. Otherwise every rank falls back to the complete remote
//     versions, newest first, until one reads back intact.
//  5. Re-protect (reprotector.h): nothing when every shard was local and
//     nothing held for peers was lost; else minimal when possible, else full.
//     Blocking (Parts::background false): the version is committed before
//     Run returns, or the report says "unprotected" (a restore that
//     succeeded but could not re-protect is still a restore). Background: bytes are counted first
//     (step 6), then the minimal re-protect is left to RunDeferredReprotect (a task of the commit
//     thread) with the slots it reads or writes pinned, or the full one is started as a version in
//     flight like a Save's.
//  6. Bytes received per node (restore and re-protect) are allgathered into
//     the report.
//
// Thread-safety: one Run per executor, on the application thread, while no
// version is in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "memento/common/status.h"
#include "memento/placement/recovery_planner.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/stage.h"
#include "memento/runtime/transport.h"
#include "protect/protection_layout.h"
#include "protect/reduce_chain.h"
#include "recovery/buffer_hold.h"
#include "recovery/partial_decode.h"
#include "recovery/reprotector.h"
#include "recovery/shard_io.h"
#include "store/slot_allocator.h"
#include "transport/wire.h"

namespace memento::runtime {

class RecoveryExecutor {
 public:
  // Everything is borrowed and must outlive the executor.
  struct Parts {
    Transport* transport = nullptr;
    NodeStore* store = nullptr;
    const ProtectionLayout* layout = nullptr;
    const ShardIo* io = nullptr;
    SlotAllocator* slots = nullptr;
    Reprotector* reprotector = nullptr;
    uint64_t chunk_bytes = 0;
    StageHook hook;  // may be empty
    // Set to the lineage of the versions the restore considers (the newest
    // run's) once the inventory is taken; left alone when there is none.
    uint64_t* lineage = nullptr;
    // Whether Run returns before the re-protect (step 5).
    bool background = false;
    // Held while the background re-protect still reads the registered
    // buffers (a lost node's rank restored into them); may be null.
    std::shared_ptr<BufferHold> buffers;
    // The caller's own record, carried by the inventory's allgather (one
    // collective less per restore); `on_gathered` gets every rank's, in rank
    // order, before the plan. An error it returns ends Run (every rank sees
    // the same records, so every rank ends alike). May be empty.
    std::vector<uint8_t> rider;
    std::function<Status(const std::vector<std::vector<uint8_t>>&)> on_gathered;
  };
  explicit RecoveryExecutor(Parts parts);
  ~RecoveryExecutor();

  // Collective. The restored version is committed (and the allocator's
  // committed slot set) when it returns OK. When no version can be rebuilt
  // from memory or read from the remote tier: NotFound "nothing to restore"
  // if the newest run never committed one (a fresh start) and no attempt
  // wrote into the buffers, else Unrecoverable (its committed versions are
  // lost). A failure that is not about the copies (a transfer timed out, a
  // peer died) with no remote version to fall back on keeps its own code
  // (Unavailable, Timeout): a relaunch may succeed.
  Result<RestoreReport> Run();

  // After a successful background Run: whether the minimal re-protect is left
  // to RunDeferredReprotect.
  bool reprotect_deferred() const { return deferred_; }
  // Collective: the deferred minimal re-protect, agreed (AllTrue) and
  // committed; then the pinned slots are released. true: protected again;
  // false: some rank failed (the restored version stays committed where it
  // was, the next Save protects again); an error only when a collective
  // failed.
  Result<bool> RunDeferredReprotect();

 private:
  // A replica transfer of step 3: `src` sends its copy of `owner`'s shard to `dst`.
  struct Transfer {
    int src = -1;  // world ranks
    int dst = -1;
    int owner = -1;
  };
  // A rank's outcome of one attempt: kRestored, or why it failed. A bad copy
  // (kEndToEnd: a rebuilt shard against its owner's seals; kSealed: a copy
  // against its own region crc32c as it was read) is marked bad and the
  // restore planned again; kNoSeals: no copy of the shard owner's entry
  // seals survives, so a shard rebuilt for this version cannot be checked
  // end to end and the version's memory copies are passed over for the next
  // candidate (an older version in memory, or remote); any other failure
  // (kNone) is not a copy's fault.
  enum class Mismatch : uint8_t { kNone = 2, kEndToEnd = 1, kSealed = 3, kNoSeals = 4 };
  static constexpr uint8_t kRestored = 0;
  // Every rank's outcome of one attempt (step 4).
  struct Agreement {
    bool everyone = false;       // every rank restored its shard
    bool other_failure = false;  // some failure is not a bad copy's
    bool no_seals = false;       // some rank's outcome is kNoSeals
    std::vector<uint8_t> outcomes;  // per rank: kRestored or a Mismatch
    // Per rank: its byte counters when it voted (GatherByteCounts' record,
    // the re-protect's still 0), so that a restore agreed at once needs no
    // collective of its own for them.
    std::vector<std::vector<uint8_t>> counters;
  };

  Status TakeInventory();                                  // 1
  wire::Inventory MyInventory();
  // Keeps the newest lineage's items and remote versions (input_) and notes
  // the nodes that report none as lost; Unavailable when the ranks' remote
  // listings disagree on a version newer than anything else.
  Status ChooseLineage(const std::vector<wire::Inventory>& theirs);
  Result<placement::RecoveryPlan> Plan();                  // 2
  Status GatherEntrySeals();                               // 3 (collective part)
  // The seals records this rank vouches for in `version` of `lineage_`
  // (GatherEntrySeals' contribution): its own entries' sealed crc32c and the
  // verified seals regions it keeps for peers.
  std::vector<uint8_t> SealsRecordsFor(uint64_t version, uint64_t lineage) const;
  // Whether every rank's contribution for the plan's version came with the
  // inventory (its guess was that version, or it holds none of it), so that
  // GatherEntrySeals needs no collective. Every rank decides alike.
  bool GuessesCoverPlan() const;
  Status TransferAndRestore();                             // 3
  // Where this rank's rebuilt shard lands (landed_): a lost node's rank
  // lands it in its registered host buffers (its store is new, its pages
  // still being reserved: the shard goes into a slot afterwards, LandInStore)
  // or, with device entries, begins writing a fresh slot of the plan's
  // version (pinned); a survivor takes memory of its own. DropLanding
  // invalidates and unpins the slot; ReleaseLanding only unpins it (the
  // re-protect sealed or dropped it). Both end the buffers' hold.
  Status PrepareLanding();
  void DropLanding();
  void ReleaseLanding();
  // A shard landed in the buffers: copied into a fresh slot (pinned, its
  // entries sealed with the restored crc32c) that becomes landed_, for the
  // re-protect; then the buffers' hold ends. OK at once for any other
  // landing. Corruption when the buffers no longer hold what was restored
  // (written before WaitSnapshot()).
  Status LandInStore();
  void EndHold();
  Status ExchangeReplicas();
  Status SendReplica(size_t index);
  Status ReceiveReplica(size_t index);
  // Runs the decode chains built for this attempt (chains_).
  Status RunDecodes();
  // This rank's shard into its buffers: a survivor's own copy joined (started
  // with the attempt), a landed shard checked and copied.
  Status RestoreMyShard(Behind* own_copy);
  // The landed shard copied into the buffers, hashed as it is copied, and
  // checked: a replica against its holder's seal, every entry against its
  // owner's seals (a mismatch sets mismatch_); then its entries are sealed
  // in the slot.
  Status CheckAndCopyLanded();
  Result<Agreement> Agree(const Status& local);            // 5
  // A copy a rank served to another: (kind, node, lane, a, b), with a, b the
  // stripe and row of a parity row, the owner and -1 of a replica.
  using ServedCopyId = std::tuple<int, int, int, int, int>;
  static constexpr int kParityCopy = 0;
  static constexpr int kReplicaCopy = 1;
  // After an attempt whose failures are all bad copies (collective): every
  // rank checks against their sealed crc32c (NodeStore::VerifyRegion) the
  // parity rows it served to a decode that failed the end-to-end check and
  // the replicas it sent that failed their seal where they landed, and the
  // ranks share those that fail.
  Result<std::set<ServedCopyId>> VerifyServedCopies(const Agreement& agreed);
  // Marks the sources of every mismatched shard bad (true if any was valid
  // before). A decode's parity rows, or a replica that failed its seal on
  // arrival, are marked only when they fail their holder's check
  // (`bad_served`) or when the same plan has been run again already. A
  // mismatch whose copies all pass sets *again: the bytes changed on the
  // way, and the same plan is run once more.
  bool MarkMismatchedSources(const Agreement& agreed, const std::set<ServedCopyId>& bad_served,
                             int attempt, bool* again);
  // One failed attempt's verdicts, shared by the steps of MarkMismatchedSources.
  struct Mismatches {
    const std::set<ServedCopyId>& bad_served;  // copies that fail on their holder
    std::set<std::pair<int, int>> bad_local;   // (node, lane): own copies that fail
    std::string next;                          // "(attempt N)" of the next plan
    bool changed = false;                      // an item was marked bad
    bool again = false;                        // the same plan runs once more
  };
  // The blame for one mismatched replica or decode source: marks its bad
  // copies and returns what to name in the note, or nothing when its note is
  // given already (the source is sent or decoded again, or a replica passes
  // on its holder).
  std::optional<std::string> BlameReplica(const placement::ShardSource& s, uint8_t outcome,
                                          const std::string& shard, Mismatches* m);
  std::optional<std::string> BlameDecode(const placement::ShardSource& s,
                                         const std::string& shard, Mismatches* m);
  // When the failed plan read from remote: drops its version from the remote
  // candidates (true), so that the next plan tries the next one.
  // Passes over the memory copies of the plan's version (a shard it
  // rebuilds cannot be checked); whether there were any.
  bool DropMemoryVersionOfPlan();
  bool DropRemoteVersionOfPlan();
  // Every remaining complete remote version, newest first, until one reads
  // back with every crc right on every rank.
  Status FallBackToRemote();
  Status Reprotect();                                      // 6
  // The minimal re-protect, the Stage::kReprotect hook and its agreement
  // (AllTrue). true: the version's slot here is committed; false: a lost
  // node's rank dropped its new slot again, *why says what failed; an error:
  // the collective failed.
  Result<bool> MinimalAgreed(ReduceBytes* bytes, std::string* why);
  // Background: reserves what the deferred minimal re-protect reads or writes.
  void DeferMinimal();
  int ReprotectTagBase() const;
  bool MyNodeLost() const;  // this rank's node is one of the plan's failed nodes
  Status GatherByteCounts();                               // 7
  Status AddByteCounts(const std::vector<std::vector<uint8_t>>& per_rank);

  // Marks an item of the agreed inventory as not valid; true if it was valid.
  bool MarkBad(const placement::InventoryItem& bad);
  Status RunHook(Stage stage, uint64_t version) const;

  const Parts parts_;
  const ProtectionLayout& pl_;
  RestoreReport report_;

  // Steps 1 - 2.
  placement::RecoveryInput input_;
  uint64_t lineage_ = 0;  // of every version considered

  // One attempt (steps 3 - 4).
  placement::RecoveryPlan plan_;
  const placement::ShardSource* mine_ = nullptr;
  bool all_local_ = true;
  std::optional<int> my_slot_;
  std::vector<Transfer> transfers_;
  SealsByOwner seals_of_;
  // Per rank, from the inventory's allgather: the version (0: none) and
  // lineage whose seals records it sent along (its newest committed one, the
  // plan's usual choice), those records, and every (version, lineage) for
  // which it has any to give.
  struct SealsGuess {
    uint64_t version = 0, lineage = 0;
    std::vector<uint8_t> records;
    std::vector<std::pair<uint64_t, uint64_t>> vouches;
  };
  std::vector<SealsGuess> guesses_;
  std::vector<ReduceChain> chains_;
  std::vector<DecodeChainInfo> chain_info_;
  std::vector<uint32_t> crcs_;  // this rank's restored entries
  uint64_t staged_bytes_ = 0;   // of them, device bytes staged (CopySlotToBuffers)
  ShardLanding landed_;         // replica / decode: the shard as rebuilt
  // Landed in the buffers (else -1): the slot LandInStore fills, pinned from
  // the landing on, so that a Save issued meanwhile takes another one.
  int buffer_slot_ = -1;
  bool holding_ = false;  // parts_.buffers is held by this executor
  // Copies landed_ into the buffers while it lands (with landed_).
  std::unique_ptr<LandedCopy> landed_copy_;
  // A replica's sealed crc32c, as its holder sent it, and whose it is.
  struct ReplicaSeal {
    uint32_t crc = 0;
    std::string from;
  };
  std::optional<ReplicaSeal> replica_seal_;
  RestoreSource source_ = RestoreSource::kLocalMemory;
  Mismatch mismatch_ = Mismatch::kNone;  // why this attempt failed here, if a copy was bad
  // Some rank holds a committed version of the chosen lineage (a slot marked
  // committed, or a complete remote version).
  bool committed_seen_ = false;
  // An attempt has run its transfers: the registered buffers may hold part
  // of a version, so running out of plans is no longer "nothing to restore".
  bool wrote_buffers_ = false;
  bool fell_back_ = false;  // restored from the remote tier after the plan failed
  bool reprotect_failed_ = false;  // the blocking full re-protect did not commit
  // A plan was run again because the copies it read passed their holders'
  // checks; the next mismatch blames them.
  bool ran_again_ = false;
  // Replicas sent again for that reason: (version, holder node, lane, owner).
  std::set<std::tuple<uint64_t, int, int, int>> resent_replicas_;

  // Step 5 in the background: the survivor's slot of the version, pinned
  // until RunDeferredReprotect ends (a lost node's is landed_'s slot).
  bool deferred_ = false;
  int pinned_slot_ = -1;

  std::atomic<uint64_t> sent_{0};
  uint64_t received_ = 0;
};

}  // namespace memento::runtime
