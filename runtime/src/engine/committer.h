// Committer: decides the fate of each version on its own thread, the commit
// thread, which issues every collective of a version.
//
// For one version (Submit): wait for the snapshot, end every chunk stage
// (entry crcs, protect, extra stages), seal each entry (length + crc32c) and
// then the slot; one AllTrue("my shard is sealed"). All true: the slot is
// marked committed, older copies of the same version are dropped, the slot
// becomes the allocator's committed slot and, every persist_every-th
// persistable version, is handed to the Persister. Any false: the slot is
// invalidated on every rank and the previous committed version stays the
// newest. A failed collective (a dead peer) leaves the sealed slot as it is:
// the outcome elsewhere is unknown and Restore's agreement decides.
//
// At most one version is in flight (Begin .. its decision); WaitVersion()
// blocks until it is decided and returns its outcome. Tasks (SubmitTask: a
// restore's background re-protect) run on the commit thread before any
// version submitted after them, so that their collectives and a version's
// are issued in the same order on every rank; Wait() blocks until both the
// version and every task are done.
//
// Thread-safety: Begin / Submit from the application thread; Wait, latest and
// SetLatest from any thread. The Committer's lock is never held while calling
// out (stages, store, transport, allocator, persister).
#pragma once

#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/chunk_stage.h"
#include "memento/runtime/node_store.h"
#include "memento/runtime/stage.h"
#include "memento/runtime/transport.h"
#include "persist/persister.h"
#include "snapshot/entry_crc_stage.h"
#include "snapshot/snapshot_pipeline.h"
#include "store/slot_allocator.h"

namespace memento::runtime {

class Committer {
 public:
  // Everything is borrowed and must outlive the Committer; persister may be null.
  struct Parts {
    Transport* transport = nullptr;
    NodeStore* store = nullptr;
    SnapshotPipeline* pipeline = nullptr;
    EntryCrcStage* crcs = nullptr;        // ended first: the seals need its entry crcs
    std::vector<ChunkStage*> stages;      // ended after it, in order
    std::vector<uint64_t> entry_bytes;    // per registered entry
    SlotAllocator* slots = nullptr;
    Persister* persister = nullptr;
    int persist_every = 0;
    StageHook hook;  // may be empty
    // Called on the commit thread after a version committed on every rank
    // (even if marking it committed failed on this one), before the version
    // counts as decided: a collective that every rank of the commit enters.
    // A failure stops checkpointing like a failed commit collective. May be empty.
    std::function<Status(uint64_t version)> after_commit;
    // Called on the commit thread after a version did not commit (it failed
    // here or elsewhere, or the collective broke). May be empty.
    std::function<void(uint64_t version)> after_failure;
  };

  explicit Committer(Parts parts);
  ~Committer();  // waits for the in-flight version, joins the commit thread

  // A version is now in flight: Wait() blocks until Submit's decision.
  void Begin();
  // Hands the in-flight version to the commit thread. `slot` is kNoSlot when
  // the version failed before its slot was begun (the pipeline reports why).
  // `persistable`: whether the version counts for persist_every.
  void Submit(uint64_t version, int slot, bool persistable);
  // Runs `task` on the commit thread, before any version submitted later. A
  // non-OK result means a collective of it failed: checkpointing stops as
  // after a failed commit collective (broken()).
  void SubmitTask(std::function<Status()> task);
  // Blocks until no version is in flight.
  void WaitVersion();
  // Blocks until no version is in flight and no task is queued or running;
  // then the first failure (a version that did not commit, a task's) not
  // reported by an earlier Wait, else broken(), else OK. Each failure is
  // reported once.
  Status Wait();

  // OK, or why checkpointing has stopped for good: a commit collective
  // failed (a peer is gone or timed out), which leaves the transport unusable
  // (transport.h), so no later version can commit until the job is relaunched
  // and restores. Sticky once set.
  Status broken() const;

  // The newest version committed (or restored, SetLatest).
  std::optional<uint64_t> latest() const;
  void SetLatest(uint64_t version);

 private:
  struct Job {
    uint64_t version = 0;
    int slot = -1;
    bool persistable = false;
  };
  void Loop();
  // `committed`: set once every rank voted to commit (a later failure, here
  // or in after_commit, does not undo that).
  Status CommitOne(const Job& job, bool* committed);
  // Ends the stages and seals this rank's entries and slot: this rank's vote.
  Status SealLocal(const Job& job);
  // After a true AllTrue: the slot becomes the committed one.
  Status MarkCommitted(const Job& job);
  Status RunHook(Stage stage, uint64_t version) const;
  // A commit collective failed: the transport is unusable from now on, so
  // checkpointing has stopped (broken()). Returns `failed`.
  Status Broke(Status failed);

  const Parts parts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool in_flight_ = false;
  std::optional<Job> job_;
  std::deque<std::function<Status()>> tasks_;
  bool task_running_ = false;
  Status unreported_;  // the first failure since the last Wait
  Status broken_;  // see broken()
  std::optional<uint64_t> latest_;
  uint64_t commits_ = 0;  // persistable commits, for persist_every
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace memento::runtime
