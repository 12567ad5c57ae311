// The inside of Checkpointer, shared by checkpointer.cc (registration, Save,
// commit thread) and restore.cc (Restore). See checkpointer.h for the
// contract and the threading model.
#pragma once

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

#include "entry_crc_stage.h"
#include "entry_seals.h"
#include "memento/placement/recovery_plan.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/node_store.h"
#include "persister.h"
#include "protect_stage.h"
#include "protection_layout.h"
#include "reduce_chain.h"
#include "snapshot_pipeline.h"

namespace memento::runtime {

struct RegisteredEntry {
  std::string name;
  uint8_t* data = nullptr;
  uint64_t bytes = 0;
  EntryLayout layout;
  bool device = false;
};

class Checkpointer::Impl {
 public:
  Impl(Config config, std::shared_ptr<Transport> transport, std::shared_ptr<RemoteStore> remote,
       FaultHooks hooks);
  ~Impl();

  Status RegisterBuffer(const std::string& name, void* data, uint64_t bytes, EntryLayout layout);
  Status AddChunkStage(ChunkStage* stage);
  Status Prepare();
  Status Save(uint64_t step);
  Status WaitSnapshot();
  Status Wait();
  Status WaitPersist();
  Result<RestoreReport> Restore();
  std::optional<uint64_t> LatestCommitted() const;
  double BlockedSeconds() const;
  int rank() const { return transport_->rank(); }
  const std::string& node() const { return node_; }

 private:
  // Starts the pipeline for `version` (the Save path minus its argument
  // checks). `persistable`: whether this version counts for persist_every.
  Status StartVersion(uint64_t version, bool persistable);
  // Picks the slot for a new version: never the newest committed one, never
  // one pinned by the persister; blocks (counted as stall) if none is free.
  int ChooseSlot();
  void CommitLoop();
  Status CommitOne(uint64_t version, int slot, bool persistable, const Status& not_started);
  Status RunHook(Stage stage, uint64_t version) const;

  // restore.cc
  Status CopySlotToBuffers(int slot, uint64_t version, std::vector<uint32_t>* crcs);
  Status ReadRemoteToBuffers(uint64_t version, std::vector<uint32_t>* crcs);
  // recovery_executor.cc: Restore under a protecting scheme (planner + executor).
  Result<RestoreReport> RestoreProtected();
  // The newest complete remote version, or -1 when there is none or no remote
  // tier; a failure to list is appended to `notes` (and counts as none).
  int64_t NewestRemoteVersion(std::vector<std::string>* notes) const;
  // Copies `shard` (this rank's whole shard, entries concatenated) into the
  // registered buffers; per-entry crc32c into `crcs`.
  Status ScatterShardToBuffers(const std::vector<uint8_t>& shard, std::vector<uint32_t>* crcs);
  // Re-snapshots the restored buffers as `version` (re-protecting it) and
  // waits for its commit.
  Status Reseed(uint64_t version);
  // Bytes [begin, begin + len) of this rank's shard into dst (zero beyond its
  // end): from `shard` when given (a restored shard), else from the sealed
  // entries of `slot`.
  Status ReadShardRange(int slot, const std::vector<uint8_t>* shard, uint64_t begin, uint64_t len,
                        uint8_t* dst) const;
  // reprotect.cc: rebuilds what the lost nodes held for plan.version (every
  // rank calls it; a lost node's rank writes `restored_shard` and its held
  // regions into a fresh slot and seals it). *slot gets this rank's slot of
  // the version on success. The caller agrees (AllTrue) and commits.
  // `seals_of`: every owner's entry seals, for the seals regions it keeps.
  Status ReprotectMinimal(const placement::RecoveryPlan& plan,
                          const std::vector<uint8_t>* restored_shard,
                          const std::map<std::pair<int, int>, std::vector<EntrySeal>>& seals_of,
                          int tag_base, ReduceBytes* bytes, int* slot);
  // recovery_executor.cc: one allgather of the entry seals of `version` every
  // rank can vouch for (its own verified entries, the verified seals regions
  // it keeps for peers) into (node, lane) -> seals.
  Status GatherEntrySeals(uint64_t version,
                          std::map<std::pair<int, int>, std::vector<EntrySeal>>* out);

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
  EntryCrcStage crc_stage_;
  std::vector<CopyTask> tasks_;                   // reused by every version; only dst changes
  std::set<std::pair<int, int>> pinned_regions_;  // (slot, region) host-registered for CUDA
  std::vector<void*> pinned_ptrs_;                // their addresses, unpinned at destruction
  std::unique_ptr<SnapshotPipeline> pipeline_;
  std::unique_ptr<Persister> persister_;
  std::optional<ProtectionLayout> protection_;   // node indices, groups, held regions
  std::unique_ptr<ProtectStage> protect_stage_;  // only when the scheme protects

  // State shared with the commit thread.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool in_flight_ = false;  // a version is between Save and its commit decision
  bool job_ready_ = false;  // the commit thread has a version to finish
  uint64_t job_version_ = 0;
  int job_slot_ = -1;
  bool job_persistable_ = false;
  Status job_status_;  // a failure before the pipeline started: vote "false" at once
  Status version_status_;  // outcome of the last finished version
  std::optional<uint64_t> latest_committed_;
  int committed_slot_ = -1;  // slot of latest_committed_, -1 if not in memory
  uint64_t commits_ = 0;     // persistable commits, for persist_every
  bool stop_ = false;
  double blocked_seconds_ = 0;  // application thread only
  std::thread commit_thread_;
};

}  // namespace memento::runtime
