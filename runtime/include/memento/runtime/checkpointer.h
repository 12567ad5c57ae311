// Checkpointer: the engine a training job calls. It keeps the newest
// checkpoints of the buffers registered with it in CPU shared memory, protected
// across nodes by the configured scheme (Config::scheme), persisted every
// Config::persist_every versions to a remote tier, and restores the newest
// version the job can still rebuild after a relaunch.
//
//   auto ck = Checkpointer::Create(Config::FromEnv().value(), transport).value();
//   ck->RegisterBuffer("w", w.data(), w.size() * 4, {"float32", {N}, {n}, {off}});
//   auto r = ck->Restore();                   // after a relaunch
//   if (r.ok()) step = r->version + 1;
//   else if (r.status().code() != StatusCode::kNotFound) return r.status();  // lost
//   for (; step < steps; ++step) {
//     ck->WaitSnapshot();   // before the optimizer writes the buffers
//     optimizer_step();
//     forward_backward();
//     if (step % k == 0) ck->Save(step);  // returns once the copy started (and the
//   }                                     // previous version, if still in flight, is done)
//   ck->Finish();  // a normal end: the same job started again begins fresh
//
// Collective calls (Prepare, Save, Restore) must be made by every rank, in the
// same order. Every call is made from one application thread; the engine's own
// threads never call the application. How the engine works inside (threads,
// commit, persist, restore protocols): runtime/README.md.
//
// Ownership: the registered buffers are owned by the caller and must stay
// valid while the Checkpointer lives. The Checkpointer owns its node store
// mapping (it outlives the process on purpose: only Finish, at the normal
// end of a run, unlinks it) and its threads; destruction waits for the
// in-flight version and the persists already scheduled.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/runtime/chunk_stage.h"
#include "memento/runtime/config.h"
#include "memento/runtime/remote_store.h"
#include "memento/runtime/restore_report.h"
#include "memento/runtime/stage.h"
#include "memento/runtime/store_layout.h"
#include "memento/runtime/transport.h"

namespace memento::runtime {

// Which Save calls took a checkpoint (Config::interval), for reports and tests.
// Checkpointer::ProtectionState().
enum class Protection { kProtected, kReprotecting, kUnprotected };
// "protected", "re-protecting", "unprotected".
const char* ProtectionName(Protection state);

// Where a run stands (Checkpointer::Position): its lineage (0 before
// Prepare) and its newest committed or restored version.
struct RunPosition {
  uint64_t lineage = 0;
  std::optional<uint64_t> latest;
};

struct IntervalStats {
  bool automatic = false;   // MEMENTO_INTERVAL=auto
  bool last_saved = false;  // whether the last Save call took a checkpoint
  uint64_t saves = 0;       // Save calls that took a checkpoint
  uint64_t skipped = 0;     // Save calls that returned OK without one
  int interval_steps = 1;   // the interval in force (auto: the one agreed by all ranks)
  int changes = 0;          // times auto changed it (since creation or the last Restore)
  // Auto: the measurements agreed across ranks behind the interval (the maximum
  // over ranks of each rank's smoothed value); 0 before the first agreement.
  double step_s = 0, stall_s = 0, protect_s = 0;
};

class Checkpointer {
 public:
  // Makes a Checkpointer for this rank. `config` is validated (InvalidArgument
  // naming the field). `transport` is shared with the caller, who may use it
  // too but must not issue collectives concurrently with Save/Restore.
  // `remote`: the remote tier; when null and config.remote_dir is set, a
  // DirectoryRemoteStore over it is made; when both are empty there is none.
  // `hooks`: fault injection (stage.h), empty in production. Cheap: nothing is
  // allocated or started before Prepare.
  static Result<std::unique_ptr<Checkpointer>> Create(Config config,
                                                      std::shared_ptr<Transport> transport,
                                                      std::shared_ptr<RemoteStore> remote = nullptr,
                                                      FaultHooks hooks = FaultHooks());

  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Registers `bytes` bytes at `data` as entry `name` (unique, 1..1024 bytes)
  // with its tensor layout (kept with every copy, for elastic restore). Host
  // memory, or device memory when built with CUDA. Entries are checkpointed in
  // registration order. Only before Prepare(): FailedPrecondition afterwards
  // (the layout is fixed); InvalidArgument for a bad or repeated name, null
  // data or an invalid layout. The memory must stay valid until the
  // Checkpointer is destroyed: a snapshot, and a restore's copy of a lost
  // node's shard into its new store, read it in the background (Wait()
  // returns when nothing does).
  Status RegisterBuffer(const std::string& name, void* data, uint64_t bytes,
                        EntryLayout layout = EntryLayout());

  // Registers a stage that sees every landed chunk of every version
  // (chunk_stage.h); a failing stage fails the version. Only before Prepare().
  // The stage must outlive the Checkpointer.
  Status AddChunkStage(ChunkStage* stage);

  // Collective. Agrees on the settings, fixes the layout, learns every rank's
  // node identity, lane and entries (two allgathers), and creates or
  // re-attaches this rank's node store with Config::slots slots (the only
  // allocation: slots x (registered bytes + what the scheme holds for peers);
  // cost: zeroing it once, in the background for a new store, whose first
  // version waits for it). Called by the first
  // Save or Restore if not called before. FailedPrecondition when nothing is
  // registered or another rank failed; ElasticRestoreNeeded when the surviving
  // stores were written for another number of nodes or ranks per node and
  // Config::elastic is off (with it on, they are set aside for Restore).
  Status Prepare();

  // Collective. Starts checkpoint `step` (> LatestCommitted(), else
  // InvalidArgument) and returns once its snapshot is scheduled; the copy,
  // protection, commit and persist go on in the background. Blocks only while
  // the previous version is still in flight (it waits for its commit), or,
  // with Config::slots == 2, while the slot it must reuse is being persisted.
  // An error of the previous version is reported by Wait(), not here; Save
  // fails for its own reasons, and once checkpointing has stopped for good (a
  // commit collective failed: a peer is gone or timed out, and the transport
  // is unusable), every later Save and WaitSnapshot returns that failure
  // instead of pretending: relaunch the job and Restore(). The blocked time counts in
  // BlockedSeconds().
  //
  // Config::interval decides which calls take a checkpoint: every call (1,
  // the default), the steps that are multiples of N, or auto (the interval
  // that maximises goodput for the measured costs and Config::node_mtbf_h,
  // the same on every rank). A call that does not take one returns OK at once
  // without waiting for anything (IntervalStats counts it); steps must still
  // increase from call to call.
  Status Save(uint64_t step);

  // Whether Save(step) would take a checkpoint now (no side effects): callers
  // that prepare their buffers for a save (staging copies) skip that work
  // when it would not. Application thread.
  bool WouldSave(uint64_t step) const;

  // Which Save calls took a checkpoint so far. Thread-safe.
  IntervalStats Interval() const;

  // Device buffers: the CUDA stream (a cudaStream_t) on which the training
  // queues the work that writes the registered device buffers. Each Save
  // records an event on it and the snapshot's device copies wait for that
  // event, so they copy what the work queued before Save produces, without
  // blocking the application thread. nullptr (the default) = the legacy
  // default stream, which also covers every blocking stream (not streams
  // created with cudaStreamNonBlocking, such as PyTorch's side streams: pass
  // those here). Application thread; takes effect at the next Save. No-op
  // without CUDA.
  void SetDeviceStream(void* cuda_stream);

  // Device buffers, instead of a stream: a CUDA event (a cudaEvent_t) that the
  // caller records on its producing stream(s) before each Save, after the
  // work that writes the registered device buffers; the snapshot's device
  // copies wait for it. For callers that hold events, not streams (a
  // framework's stream abstraction). The caller owns the event and keeps it
  // alive until the Checkpointer is gone or the event is replaced; nullptr
  // goes back to the stream. Application thread; takes effect at the next
  // Save. No-op without CUDA.
  void SetDeviceEvent(void* cuda_event);

  // Returns when the registered memory may be modified again: the in-flight
  // version's snapshot is complete (or there is none), and on a lost node's
  // rank after Restore, the restored shard's copy into its new node store
  // (the restore landed it in the buffers and returned without waiting for
  // the store's pages). Call it before writing
  // registered buffers. Returns the snapshot's status: a failed copy is
  // reported here once (later calls, and any after a successful Restore,
  // return OK until the next version's snapshot) and again by Wait().
  Status WaitSnapshot();

  // Returns when the in-flight version is committed on every rank or has
  // failed (and a restore's background re-protect has ended). OK, or the
  // first failure since the last Wait() (a version that did not commit, and
  // is restorable on no rank; a failed re-protect), each reported once, so
  // that a failure a later Save overtook is not lost; once checkpointing has
  // stopped for good, why, every time.
  Status Wait();

  // Returns when every persist scheduled so far has finished on this rank:
  // Wait()'s failure if any, else the last persist's status. On rank 0 OK
  // means the version's manifest is written (it is visible remotely; one
  // whose persist failed is not); on the others, that this rank's file is
  // written and reported to rank 0.
  Status WaitPersist();

  // Collective. Waits for anything in flight, then copies the newest version
  // the job can rebuild into the registered buffers, bit-exact (crc32c
  // checked): from this node's memory, from peers' replicas or parity, or
  // from the remote tier when memory cannot serve. Every rank restores the
  // same version or every rank fails. It returns once every rank's buffers
  // hold the version; what the lost nodes held (replicas, parity, the
  // version in their stores) is rebuilt in the background on the commit
  // thread (Config::background_reprotect, the default; with it off, before
  // Restore returns). ProtectionState() follows it; Wait() returns when it
  // is done. The next Save does not wait for it unless it needs the slots it
  // reads or writes (a full re-protect, which snapshots the restored buffers
  // like a Save: WaitSnapshot() before writing them, as in the loop above).
  // A lost node's rank likewise copies its restored buffers into its new
  // store in the background: WaitSnapshot() before writing them (a shard
  // changed before that copy is not sealed: the re-protect fails, reported
  // by Wait(), and the next Save protects the job again).
  // A failure before it is done is survivable as far as the restored version
  // is still protected, else an older version or the remote tier serves.
  // When no version can be rebuilt from memory and none is complete
  // remotely: NotFound "nothing to restore" if no surviving store or remote
  // version records a committed one of the newest run (a fresh start: its
  // first version did not commit before the failure, nothing was ever saved,
  // or every node's memory is gone and nothing was persisted) and no attempt
  // has written into the buffers yet, else Unrecoverable (its committed
  // versions are lost, or an attempt at an uncommitted one wrote part of it
  // into the buffers: a job must not take that for a fresh start);
  // ElasticRestoreNeeded when the remote
  // version was written by another number of ranks (without Config::elastic).
  // The report says where each entry came from (restore_report.h). Restore
  // writes in place: after any failure but NotFound the registered buffers
  // may hold part of a version and part of what they held before, so the
  // job must not train on from them (exit and relaunch, as `memento launch`
  // does, or Restore again).
  //
  // Elastic (Config::elastic, on another topology than the surviving stores
  // or the remote version were written for): every rank gets the slices it
  // registered (EntryLayout) of the checkpointed global tensors, assembled
  // from the old slices that survive in memory, remote storage only for what
  // memory lacks. Restore returns once the registered buffers hold the
  // version; its snapshot under the new topology then runs in the background
  // like a Save's: call WaitSnapshot() before writing the buffers (as in the
  // training loop), and the next Save, or Wait(), waits for its protect and
  // commit (the report's reprotect mode is "full, background"). The old
  // stores are unlinked when it commits. A failure
  // before that commit leaves the old stores for the next relaunch. Until
  // Wait() the application must not run collectives of its own on the
  // engine's transport (the commit thread runs that version's); point-to-point
  // messages with tags from kFirstApplicationTag are fine. InvalidArgument naming the entry when
  // the new slices do not tile a tensor, its dtype or global shape differ, or an opaque entry is
  // restored onto another rank count; the old stores are kept for a correct relaunch then.
  //
  // Runs under one job id: every version records the lineage of the run that
  // wrote it. A run's lineage is fresh at Prepare (a run that saves without
  // restoring starts a new one); Restore considers only the versions of the
  // newest lineage (the run started last) and adopts it, so later Saves
  // continue it. An older run's versions are never restored instead, even
  // with higher step numbers (README: "Reusing a job id").
  //
  // A run that finished (Finish) is not restored, nor any older run: Restore
  // returns NotFound ("nothing to restore": a fresh start) and logs at warn
  // the job, the finished run's last step and how to continue it, unless
  // Config::resume_finished, which restores its last version and removes its
  // finished marks. A run started after it (one that saved) is restored as
  // usual. The check costs one allgather and, on rank 0, a read of the
  // remote tier's mark and manifests.
  Result<RestoreReport> Restore();

  // Collective. Ends the run normally, as a training job's close() does
  // after its last Save: waits for the version in flight and the persists
  // queued, then agrees (one AllTrue) that every rank's last version
  // committed. If so, marks the run finished at the newest committed
  // version: in every rank's node store and, on rank 0, on the remote tier
  // (a second AllTrue agrees that mark was written); then, unless
  // Config::keep_finished, every rank unlinks its node store, freeing the
  // node's memory (the mapping goes with the Checkpointer; the remote tier
  // stays). A later run under the job id then starts fresh (Restore above).
  // If some rank's last version did not commit (a failed Save, checkpointing
  // broken), its last Save returned an error (even one refused before any
  // copy, such as a step that does not increase; or NoteFailedSave), or
  // nothing ever committed, nothing is marked or unlinked (a
  // relaunch restores as after a failure), logged at warn. Returns the
  // failure Wait() would have returned, else the agreement's (Timeout /
  // Unavailable when a peer is gone), else OK; a failed remote write is
  // logged and leaves the stores in place. Do not call it while an error is
  // unwinding the job (a killed or failing run must never look finished).
  // Afterwards Save and Restore fail with FailedPrecondition; a second
  // Finish returns OK at once.
  Status Finish();

  // For a layer above (a framework adapter) whose own part of a Save failed
  // before it called Save (staging, extra state): the run's last Save counts
  // as failed, so Finish marks nothing, until a Save that starts a version
  // or a Restore succeeds.
  void NoteFailedSave();

  // The newest version committed (or restored) by this Checkpointer; empty
  // before the first one. Thread-safe.
  std::optional<uint64_t> LatestCommitted() const;

  // For a Checkpointer of this process that replaces another over the same
  // node store (same entries and layout, e.g. re-registered buffers that
  // moved): Position() of the old one after its Wait(), then ContinueRun on
  // the new one before its Prepare, on every rank. The new one continues the
  // old run instead of starting a new lineage: the versions of both count as
  // one run's for Restore (a crash during the new one's first Save still
  // restores the old one's committed versions), and LatestCommitted() and
  // the step order go on from the old one's. A zero lineage is ignored.
  RunPosition Position() const;
  void ContinueRun(const RunPosition& position);

  // Whether the newest committed (or restored) version survives the failures
  // the scheme tolerates: kReprotecting while a Restore's re-protect runs in
  // the background, kUnprotected if it failed (a lost node's copies are
  // still missing; the next committed Save protects the job again),
  // kProtected otherwise (also before any version). Thread-safe.
  Protection ProtectionState() const;

  // Seconds the application thread was blocked in Save and WaitSnapshot,
  // summed since creation: the stall training pays for checkpointing.
  // Thread-safe.
  double BlockedSeconds() const;

  // This rank's number in the transport.
  int rank() const;
  // This rank's node identity, the name of its failure domain (after Prepare()).
  const std::string& node() const;

  class Impl;

 private:
  explicit Checkpointer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace memento::runtime
