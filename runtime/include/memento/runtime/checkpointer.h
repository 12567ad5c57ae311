// Checkpointer: the engine a training job calls (DESIGN §3).
//
//   auto ck = Checkpointer::Create(Config::FromEnv().value(), transport).value();
//   ck->RegisterBuffer("w", w.data(), w.size() * 4, {"float32", {N}, {n}, {off}});
//   if (auto r = ck->Restore(); r.ok()) step = r->version;      // after a relaunch
//   for (;; ++step) {
//     ck->WaitSnapshot();   // before the optimizer writes the buffers
//     optimizer_step();
//     forward_backward();
//     if (step % k == 0) ck->Save(step);                        // returns at once
//   }
//
// Pipeline of one version (Save(v)):
//   snapshot  the registered buffers are copied in chunks (Config::chunk_bytes)
//             by Config::threads background threads into a slot of this rank's
//             NodeStore, preallocated at registration; each chunk's crc32c is
//             computed while it is in cache and handed to the ChunkStages
//             (chunk_stage.h; part 2 adds protect there).
//   seal      per entry: length + crc32c (chunk crcs combined, no second pass),
//             then the slot's sealed flag.
//   commit    one collective AllTrue("my shard is sealed"); true on every rank
//             -> the slot is marked committed and LatestCommitted() moves to v.
//             false -> the slot is invalidated on every rank; the previous
//             committed version stays the newest.
//   persist   every Config::persist_every-th committed version is written from
//             the slot (never from the live buffers) to the RemoteStore in the
//             background; see "Persist" below.
//
// Blocking (lazy blocking, DataStates-LLM):
//   - Save(v) returns once the snapshot is scheduled. It blocks only if
//       (a) a previous version is still in flight: it first waits for that
//           version to commit (at most one version is in flight), or
//       (b) Config::slots == 2 and the slot it must reuse is still being
//           persisted: it waits for that persist (see "Persist").
//   - WaitSnapshot() blocks until every chunk of the in-flight version has
//     been copied: call it before modifying registered memory.
//   - Wait() blocks until the in-flight version is committed (or failed).
//
// Persist. Every rank writes its rank file from its sealed slot on the
// persist thread, then sends a small "done" record (file size, crc) to rank 0
// point-to-point; rank 0's persist thread collects all of them, checks the
// files and writes the manifest last, then prunes to Config::persist_keep. A
// rank that fails or dies -> no manifest -> the version is never visible.
// The slot being persisted is protected from reuse: a Save picks a slot that
// is neither the newest committed one nor being persisted; with the default 2
// slots there may be no such slot, and Save then waits for the persist to end.
// Stall cost: max(0, persist time - time between the two Saves), and only on
// every persist_every-th version; set MEMENTO_SLOTS=3 to never stall.
//
// Restore (collective): every rank reports its sealed, valid versions (one
// allgather); the newest version held by every rank is copied back bit-exactly
// (crc32c verified while copying), and all ranks agree with one AllTrue; on
// disagreement the next older common version is tried, then the newest
// complete remote version if it is newer or memory cannot serve. All ranks
// restore the same version or all fail.
//
// Threading model. Save, WaitSnapshot, Wait, Restore, RegisterBuffer and
// LatestCommitted are called from one application thread (the training
// loop). Save, Prepare and Restore are collective: every rank calls them in
// the same order. Inside: `threads` copy workers; one commit thread that
// issues every collective of a version; one persist thread (point-to-point
// only). Collectives are therefore never issued by two threads of a rank at
// once (the transport contract): Prepare and Restore run on the application
// thread only while no version is in flight.
//
// Ownership: the registered buffers are owned by the caller and must stay
// valid (and not be freed) while the Checkpointer lives. The Checkpointer owns
// its node store mapping (never unlinks it) and its threads; destruction
// waits for the in-flight version and the running persist.
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

class Checkpointer {
 public:
  // `transport` is shared with the caller (it may use it too, but must not
  // issue collectives concurrently with Save/Restore). `remote`: the remote
  // tier; when null and config.remote_dir is set, a DirectoryRemoteStore over
  // it is made; when both are empty there is no remote tier. Cost: starts the
  // worker, commit and persist threads.
  static Result<std::unique_ptr<Checkpointer>> Create(Config config,
                                                      std::shared_ptr<Transport> transport,
                                                      std::shared_ptr<RemoteStore> remote = nullptr,
                                                      FaultHooks hooks = FaultHooks());

  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Registers `bytes` bytes at `data` as entry `name` (unique, 1..1024 bytes)
  // with its tensor layout (stored in metadata for elastic restore). Host
  // memory, or device memory when built with CUDA. Only before Prepare():
  // FailedPrecondition afterwards (the layout is fixed).
  Status RegisterBuffer(const std::string& name, void* data, uint64_t bytes,
                        EntryLayout layout = EntryLayout());

  // Registers a stage that sees every landed chunk (chunk_stage.h). Only
  // before Prepare(). The stage must outlive the Checkpointer.
  Status AddChunkStage(ChunkStage* stage);

  // Collective. Fixes the layout, learns the node identities (one allgather),
  // and creates or re-attaches this rank's node store with Config::slots
  // slots (the only allocation; cost: zeroing slots x registered bytes).
  // Called by the first Save or Restore if not called before.
  Status Prepare();

  // Collective. Starts checkpoint `step` (> LatestCommitted(), else
  // InvalidArgument) and returns once its snapshot is scheduled (see
  // "Blocking"). An error of the previous version is reported by Wait(), not
  // here; Save only fails for its own reasons.
  Status Save(uint64_t step);

  // Returns when the registered memory may be modified again: the in-flight
  // version's snapshot is complete (or there is none). Returns the snapshot's
  // status (a failed copy is reported here and again by Wait()).
  Status WaitSnapshot();

  // Returns when the in-flight version is committed (OK) or has failed (the
  // reason; the version then exists on no rank). OK when none is in flight.
  Status Wait();

  // Returns when every persist scheduled so far has finished; its status is
  // the last persist's (OK when none failed).
  Status WaitPersist();

  // Collective. Waits for anything in flight, then restores (see "Restore").
  // NotFound "nothing to restore" when no version is held by every rank in
  // memory and none is complete remotely.
  Result<RestoreReport> Restore();

  // The newest version committed (or restored) by this Checkpointer.
  std::optional<uint64_t> LatestCommitted() const;

  // Blocked time of the application thread in Save and WaitSnapshot, summed
  // since creation (seconds); for benchmarks and the stall report.
  double BlockedSeconds() const;

  int rank() const;
  // The node identity and lane of this rank's store (after Prepare()).
  const std::string& node() const;

  class Impl;

 private:
  explicit Checkpointer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace memento::runtime
