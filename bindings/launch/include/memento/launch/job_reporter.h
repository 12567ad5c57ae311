// The job's side of `memento launch`: how a training job tells the launcher
// its progress and what its restores rebuilt, and how it takes part in stage
// fault injection. A job that is not run by the launcher gets an inactive
// reporter (every call is a no-op, no hooks).
//
// Protocol (all files in the launcher's status folder, MEMENTO_LAUNCH_DIR):
//   events.jsonl            rank 0 appends one JSON object per line (one write()
//                           each, O_APPEND): {"event":"start","attempt":A,
//                           "total_steps":T,"t":...}, {"event":"restore_begin",...},
//                           {"event":"step","step":S,"loss":L,"step_s":...,
//                           "stall_s":...,"t":...}, {"event":"done","step":S,
//                           "state_hash":"...","t":...}. "t" is the wall clock
//                           (seconds since the epoch, CLOCK_REALTIME).
//   restore.aA.rR.json      every rank R of attempt A after Restore():
//                           {"rank":R,"ok":true,"version":V,"t_begin":..,
//                           "t_end":..,"state_hash":"..","report":{RestoreReport}}
//                           or {"rank":R,"ok":false,"error":"..."}.
//   fault.aA                the rank that kills itself for a stage injection,
//                           just before SIGKILL: {"stage":..,"version":..,
//                           "rank":..,"t":..}.
// Environment set by the launcher (read by FromEnv and left in place, so that
// the job's own subprocesses see them too; memento's Config knows they are
// the launcher's and does not warn about them):
//   MEMENTO_LAUNCH_DIR      the status folder
//   MEMENTO_LAUNCH_ATTEMPT  0 for the first launch, then 1, 2, ...
//   MEMENTO_LAUNCH_FAULT    "STAGE:VERSION:RANK[+RANK...]" (VERSION "*" = any):
//                           the rank RANK SIGKILLs itself when the engine
//                           reaches STAGE (runtime::StageName) of VERSION, the
//                           ranks after '+' first (by their pid.aA.rR).
//   MEMENTO_LAUNCH_FAULTS   `--launcher ulfm` only: "A=FAULT,..." (FAULT as above)
//                           the stage fault of each later attempt A (a job
//                           that repairs its own world learns no new
//                           environment; generation G of its world is attempt
//                           MEMENTO_LAUNCH_ATTEMPT + G, see ForGeneration).
//
// Thread-safety: Step/Start/Done/RestoreBegin from the training thread; the
// fault hooks may run on engine threads (they only read immutable state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memento/runtime/checkpointer.h"

namespace memento::launch {

class JobReporter {
 public:
  // Reads (and leaves in place) the MEMENTO_LAUNCH_* variables. Call before
  // runtime::Config::FromEnv() and before starting threads.
  static JobReporter FromEnv(int rank);
  // A job that repairs its own MPI world in-job (runtime::RunResilient under
  // `memento launch --launcher ulfm`), as working rank `rank` of generation
  // `generation` of that world: attempt MEMENTO_LAUNCH_ATTEMPT + generation,
  // its stage fault from MEMENTO_LAUNCH_FAULTS when that is set.
  // Active, it also records this process as the rank's (pid.aA.rR), so that
  // the launcher's step injections find a spare that took the place.
  static JobReporter ForGeneration(int rank, int generation);

  bool active() const { return !dir_.empty(); }
  int attempt() const { return attempt_; }

  // Rank 0 only (no-op elsewhere): the job started; it will run to step `total_steps`.
  void Start(uint64_t total_steps) const;
  // Rank 0 only: Restore() is about to be called.
  void RestoreBegin() const;
  // Rank 0 only: step `step` is done and its checkpoint saved.
  void Step(uint64_t step, double loss, double step_s, double stall_s) const;
  // Rank 0 only: the job reached its last step; `state_hash` identifies its state.
  void Done(uint64_t step, const std::string& state_hash) const;
  // Every rank: the outcome of Restore(), timed from t_begin to t_end (wall clock).
  void Restored(const Result<runtime::RestoreReport>& report, double t_begin, double t_end,
                const std::string& state_hash) const;

  // Hooks for Checkpointer::Create: SIGKILL this rank at the injected stage
  // (empty hooks when there is no injection for this rank).
  runtime::FaultHooks Hooks() const;

  // Wall clock, seconds since the epoch (the "t" of every record).
  static double Now();

 private:
  void Append(const std::string& line) const;
  void ArmFault(const std::string& spec);
  void WritePid() const;

  std::string dir_;
  int rank_ = 0;
  int attempt_ = 0;
  std::string fault_stage_;  // engine stage name, "" = none
  uint64_t fault_version_ = 0;
  bool fault_any_version_ = false;
  int fault_rank_ = -1;
  std::vector<int> fault_with_;  // ranks lost at the same instant ("RANK+RANK...")
};

}  // namespace memento::launch
