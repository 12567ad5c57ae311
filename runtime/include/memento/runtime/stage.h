// Stage: the named points of a version's life (snapshot, seal, commit, persist,
// recover, re-protect), and FaultHooks, a callback the engine calls at each of
// them (fault injection in tests; also a tracing point).
#pragma once

#include <cstdint>
#include <functional>

#include "memento/common/status.h"
#include "memento/placement/interval_tuner.h"

namespace memento::runtime {

enum class Stage {
  kSlot,       // application thread in Save, before the version's slot is begun (a
               // failure is the slot's: e.g. the file system under the store filled
               // before its pages were reserved)
  kSnapshot,   // a worker thread, after the first chunk of the version landed
  kSeal,       // commit thread, before sealing
  kCommit,     // commit thread, after sealing, before the commit collective
  kCommitted,  // commit thread, after the version is committed
  kPersist,    // persist thread, before writing the rank file
  kManifest,   // rank 0's persist thread, after every rank reported, before the manifest
  kRecover,    // application thread in Restore, after planning, before any recovery transfer
  kReprotect,  // after this rank's part of the minimal re-protect, before its commit
               // agreement: the commit thread after Restore returned (background
               // re-protect; a failure leaves the job unprotected until the next Save),
               // else the application thread in Restore (a failure makes the engine
               // re-protect the whole version instead)
};

// "slot", "snapshot", "seal", "commit", "committed", "persist", "manifest",
// "recover", "reprotect".
const char* StageName(Stage stage);

// The hook as the stages call it: empty, or returns the injected failure of
// (stage, version).
using StageHook = std::function<Status(Stage, uint64_t version)>;

struct FaultHooks {
  // Called at every Stage with the version; a non-OK result is an injected
  // failure of that stage (e.g. "this rank fails to seal"). May be empty.
  // Called from the thread named in Stage; must be thread-safe.
  StageHook at_stage;
  // The clock that times MEMENTO_INTERVAL=auto's measurements (step, stall
  // and protect time); null = the steady clock. Tests drive it. Borrowed: it
  // must outlive the Checkpointer; called from the application and commit
  // threads, so it must be thread-safe.
  placement::TunerClock* interval_clock = nullptr;
};

}  // namespace memento::runtime
