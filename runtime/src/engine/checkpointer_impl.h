// The inside of Checkpointer: owns the parts of the engine and wires them
// together (registration, Prepare, Save, Restore). The work is done by the
// parts, each in its own folder: snapshot/ (SnapshotPipeline), protect/
// (ProtectStage), engine/committer.h (the commit thread), persist/
// (Persister), store/slot_allocator.h (which slot a version may use) and
// recovery/ (RecoveryExecutor, Reprotector). See checkpointer.h for the
// contract and runtime/README.md for the threading model.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/committer.h"
#include "engine/save_schedule.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/node_store.h"
#include "persist/persister.h"
#include "protect/protect_stage.h"
#include "protect/protection_layout.h"
#include "recovery/buffer_hold.h"
#include "snapshot/entry_crc_stage.h"
#include "snapshot/registered_entry.h"
#include "snapshot/snapshot_pipeline.h"
#include "snapshot/staged_copy.h"
#include "store/slot_allocator.h"

namespace memento::runtime {

class Checkpointer::Impl {
 public:
  Impl(Config config, std::shared_ptr<Transport> transport, std::shared_ptr<RemoteStore> remote,
       FaultHooks hooks);
  ~Impl();

  Status RegisterBuffer(const std::string& name, void* data, uint64_t bytes, EntryLayout layout);
  Status AddChunkStage(ChunkStage* stage);
  Status Prepare();
  Status Save(uint64_t step);
  // The layer above failed a Save before it reached this one: Finish marks nothing.
  void NoteFailedSave() { last_save_failed_ = true; }
  Status WaitSnapshot();
  Status Wait();
  Status WaitPersist();
  Result<RestoreReport> Restore();  // finish.cc: RestoreNewest with the finished-run check
  Status Finish();                  // finish.cc
  std::optional<uint64_t> LatestCommitted() const;
  // Before Prepare, the run it will continue (ContinueRun), if any: an engine
  // replaced again before its first Save hands the same run on.
  RunPosition Position() const {
    if (lineage_ == 0 && continued_) return *continued_;
    return {lineage_, LatestCommitted()};
  }
  void ContinueRun(const RunPosition& position) { continued_ = position; }
  Protection ProtectionState() const;
  double BlockedSeconds() const;
  bool WouldSave(uint64_t step) const { return schedule_.WouldSave(step); }
  IntervalStats Interval() const { return schedule_.stats(); }
  void SetDeviceStream(void* cuda_stream) { device_stream_ = cuda_stream; }
  void SetDeviceEvent(void* cuda_event) { device_event_ = cuda_event; }
  int rank() const { return transport_->rank(); }
  const std::string& node() const { return node_; }

 private:
  // Prepare, step by step: the settings and node identities (one
  // allgather), the protection layout and every rank's entries (one more,
  // unless every rank knew its lane without the others' identities and sent
  // its topology record with the settings); this rank's node store (one
  // AllTrue); the chunk list, the stages and the threads that run them. Few
  // collectives: each costs milliseconds over gloo on a loaded node, and an
  // in-job recovery pays Prepare on its way back.
  // Collective: InvalidArgument naming the setting when the ranks' settings
  // that shape the protocol differ (the same error on every rank); else
  // every rank's node identity (`mine` is this rank's). `rider` (may be
  // empty: none) travels along; `riders` gets every rank's when every rank
  // sent one, else stays empty.
  Result<std::vector<std::string>> AgreeOnSettings(const std::string& mine,
                                                   const std::vector<uint8_t>& rider,
                                                   std::vector<std::vector<uint8_t>>* riders);
  Status LearnTopology(int* lane);
  // This rank's part of LearnTopology's allgather: its draw of the lineage,
  // its topology record (what its surviving store says) and its entries.
  std::vector<uint8_t> TopologyBlob(int lane) const;
  // With Config::elastic: sets aside this node's stores written for another
  // topology than (nodes, lanes) that lane `lane` serves (ServingLane), and
  // collects those set aside by an earlier elastic relaunch.
  Status SetAsideOtherTopology(int nodes, int lanes, int lane);
  // Every rank's entries (gathered with the rank records by LearnTopology):
  // new_catalogs_ and this store's catalog.
  Status GatherCatalogs(int lane);
  std::vector<uint8_t> EncodeOwnCatalog(int lane) const;
  std::vector<std::vector<uint8_t>> gathered_catalogs_;  // per rank, until GatherCatalogs
  Status OpenStore(int lane);
  // With Config::device_transport auto or nccl: where every rank can, wraps
  // transport_ in a DeviceRoutedTransport over an NCCL link (one AllTrue, then
  // the link's own collectives); where one cannot, logs why and goes on over
  // transport_. Before the stages are built, which take transport_.
  Status SetUpDeviceLink();
  // The elastic restore (recovery/elastic_restorer.h), then the snapshot of
  // the restored version under the new topology, protected and committed in
  // the background; the set-aside stores are released when it commits.
  // `restored`, after unlinking the damaged store Prepare set aside when it
  // succeeded (the restore did without it).
  Result<RestoreReport> DroppingSetAside(Result<RestoreReport> restored);
  // Invalidates this node store's slots of the restored lineage newer than
  // `restored` (versions every rank passed over): the run writes those
  // versions again, and a copy of the abandoned one left sealed here would be
  // restored beside the new copies elsewhere.
  void DropPassedOverVersions(uint64_t restored);
  Result<RestoreReport> RestoreElastic();
  // Restore of the newest run's newest version. With `finished_check`, the
  // finished-run check (DecideFinishedRun) rides on the restore's inventory
  // allgather and its outcome lands there (its NotFound is returned as is);
  // null: the check was made before (CheckFinishedRun).
  Result<RestoreReport> RestoreNewest(std::optional<FinishedRun>* finished_check);
  // finish.cc. Collective (one allgather of FinishedViewRecord), then
  // DecideFinishedRun.
  Result<std::optional<FinishedRun>> CheckFinishedRun();
  // This rank's record for the finished-run check.
  std::vector<uint8_t> FinishedViewRecord() const;
  // From every rank's record: the finished run a Restore must pass over
  // (NotFound, logged) or, with Config::resume_finished, resume (returned:
  // its marks are removed once the restore succeeded); nullopt when the
  // newest run did not finish.
  Result<std::optional<FinishedRun>> DecideFinishedRun(
      const std::vector<std::vector<uint8_t>>& all);
  // This rank's mark and its store's newest (lineage, version), from its own
  // store and the stores an elastic restore set aside; rank 0 adds the
  // remote tier's.
  void LocalFinishedView(std::optional<FinishedRun>* mark,
                         std::optional<std::pair<uint64_t, uint64_t>>* newest) const;
  void ClearFinishedMarks(const FinishedRun& run);
  // Commit thread: unlinks the set-aside stores after an elastic restore once
  // a version commits (the restored one, or a later one if it failed: Restore
  // waited for every earlier version, so no older one can commit then).
  void ReleaseAsideStores(uint64_t committed);
  // A fresh lineage for this run; rank 0's is taken by every rank
  // (LearnTopology's allgather carries it).
  static uint64_t DrawLineage();
  void BuildStages();
  std::vector<uint64_t> EntryBytes() const;
  // Starts the pipeline for `version` (the Save path minus its argument
  // checks). `persistable`: whether this version counts for persist_every.
  Status StartVersion(uint64_t version, bool persistable);
  // Registers the pages of slot `slot`'s device entries with the driver, so
  // that the copy engine reaches them directly (PageRuns: one call per run
  // of neighbouring entries); a failure is logged and leaves the copies to
  // the driver's staging. Logs what it registered and how long it took.
  // True when every page is registered (false with staged device copies,
  // which register nothing).
  bool PinSlot(int slot);
  // Logs that `version` waited `seconds` for a slot (held by persists).
  void NoteSlotWait(uint64_t version, double seconds);
  Status SaveCall(uint64_t step);  // Save, before its outcome is noted
  // Save's checks and the start of `step`'s version, once the schedule chose to save it.
  Status SaveNow(uint64_t step);
  // InvalidArgument when `step` is not above the latest committed version.
  Status CheckStepIncreases(uint64_t step) const;
  Status RunHook(Stage stage, uint64_t version) const;
  // RunHook as a StageHook for the parts; empty without fault hooks.
  StageHook Hook();
  // Whether the newest complete remote version was written by another number
  // of ranks than this job runs (every rank answers alike).
  bool RemoteWrittenByOtherRankCount() const;
  // Re-snapshots the restored buffers as `version` (protecting it like any
  // Save) and, unless `background`, waits for its commit: the full
  // re-protect after a restore.
  Status Resnapshot(uint64_t version, bool background);

  Config config_;
  std::shared_ptr<Transport> transport_;
  std::shared_ptr<RemoteStore> remote_;
  FaultHooks hooks_;

  // Fixed by Prepare().
  std::vector<RegisteredEntry> entries_;
  std::vector<ChunkStage*> extra_stages_;
  bool prepared_ = false;
  bool any_device_ = false;
  std::string node_;
  NodeStore store_;
  std::string set_aside_;  // a damaged store moved aside by Prepare, unlinked by a good Restore
  // Elastic restore: whether this run restores elastically (the same on every
  // rank), the stores of another topology this rank serves (unlinked once the
  // restored version is protected under the new one), every rank's entries
  // (node-major over the new topology) and what this rank's store records.
  bool elastic_ = false;
  std::vector<std::string> elastic_aside_;
  // The set-aside stores to unlink at the next commit (application and commit
  // thread, under release_mu_).
  std::mutex release_mu_;
  std::vector<std::string> release_after_commit_;
  std::vector<placement::RankCatalog> new_catalogs_;
  std::vector<uint8_t> store_catalog_;
  // The run's lineage, written with every version: fresh at Prepare, the
  // restored version's after a Restore (application thread; read by the
  // commit thread only through versions it is handed).
  uint64_t lineage_ = 0;
  std::optional<RunPosition> continued_;  // ContinueRun: the run Prepare continues
  // The last version a Save started (reset by a Restore): Finish marks the
  // run only when it committed. Application thread.
  std::optional<uint64_t> last_started_;
  // The last Save returned an error (or the layer above said one of its own
  // failed, NoteFailedSave): the run's end is not checkpointed, so Finish
  // marks nothing. Cleared by a Save that starts a version or a Restore that
  // succeeds (not by a step the schedule passes over). Application thread.
  bool last_save_failed_ = false;
  bool finished_ = false;  // Finish ran: Save and Restore refuse
  EntryCrcStage crc_stage_;
  std::vector<CopyTask> tasks_;                   // reused by every version; only dst changes
  // The slots PinSlot ran for (once each, at their first Save), and whether
  // the driver registered all of their device entries' pages (a restore
  // from such a slot lets the copy engine read it); the registered ranges'
  // starts, unregistered at destruction.
  std::map<int, bool> pinned_slots_;
  int slot_waits_ = 0;  // versions that waited for a slot (NoteSlotWait)
  std::vector<void*> pinned_ptrs_;
  // Pinned buffer pairs of the restores' copies into device buffers (ShardIo),
  // kept from one restore to the next.
  StagedCopierPool device_copiers_;
  std::unique_ptr<SnapshotPipeline> pipeline_;
  std::unique_ptr<SlotAllocator> slots_;
  std::unique_ptr<Persister> persister_;
  std::optional<ProtectionLayout> protection_;   // node indices, groups, held regions
  std::unique_ptr<ProtectStage> protect_stage_;  // only when the scheme protects

  SaveSchedule schedule_;  // which Save calls take a checkpoint (Config::interval)
  std::unique_ptr<Committer> committer_;  // the commit thread; after the stages it ends
  // committer_ for the thread-safe getters, which may run while Prepare
  // creates it on the application thread.
  std::atomic<Committer*> committer_view_{nullptr};

  // The newest version's protection (ProtectionState): set by the restore
  // (application thread) and by the background re-protect and every commit
  // (commit thread); kReprotecting with the commit thread idle means the
  // background re-protect's version failed to commit.
  std::atomic<Protection> protection_state_{Protection::kProtected};

  // Held while a restore's background re-protect still reads the registered
  // buffers (a lost node's rank restored into them): WaitSnapshot waits.
  std::shared_ptr<BufferHold> buffer_hold_ = std::make_shared<BufferHold>();

  // The start (SnapshotPipeline::starts) whose snapshot failure WaitSnapshot
  // reported, or a restore passed: each failure is reported once (wait()
  // reports it as well), not at every optimizer step until the next save.
  std::atomic<uint64_t> snapshot_failure_seen_{0};

  // Written by the application thread only; any thread may read it.
  std::atomic<double> blocked_seconds_{0};
  void* device_stream_ = nullptr;  // cudaStream_t producing device buffers; application thread
  void* device_event_ = nullptr;   // cudaEvent_t the caller records instead; application thread
};

}  // namespace memento::runtime
