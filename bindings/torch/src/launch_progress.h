// What a TorchCheckpointer tells `memento launch` on its own (the job side of
// the launcher's protocol, memento/launch/job_reporter.h): that the job
// started, each step (at every Save call, with the time since the previous one
// and the time the caller was blocked in Save and WaitSnapshot), the outcome
// and timing of each Restore, and that the run finished. Outside the launcher
// (no MEMENTO_LAUNCH_DIR) every call is a no-op.
//
// Thread-safety: the calls come from the application thread (the one that
// calls Save / Restore / WaitSnapshot); Hooks() are handed to the engine once.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "memento/common/status.h"
#include "memento/launch/job_reporter.h"
#include "memento/runtime/restore_report.h"
#include "memento/runtime/stage.h"

namespace memento::torch_adapter {

class LaunchProgress {
 public:
  // `rank`: this process's rank in the job; `total_steps`: the step the job
  // runs to (0 = not known), shown in the launcher's progress line.
  LaunchProgress(int rank, uint64_t total_steps);

  bool active() const { return reporter_.active(); }
  // The launcher's stage fault injection for this rank (empty hooks when none).
  runtime::FaultHooks Hooks() const { return reporter_.Hooks(); }

  // Around Restore: the begin time, then the outcome (NotFound = nothing to restore).
  void RestoreBegin();
  void Restored(const Result<runtime::RestoreReport>& report);

  // Time the application thread spent blocked in memento (Save, WaitSnapshot,
  // or the caller's own preparation of a save), counted into the next step.
  void AddStall(double seconds);
  // The loss of the step whose Save comes next (shown by the launcher).
  void SetLoss(double loss);
  // A Save(step) call returned: a step event.
  void Step(uint64_t step);
  // The run reached its end; `state_hash` identifies the final state (may be empty).
  void Done(const std::string& state_hash);
  uint64_t last_step() const;

 private:
  launch::JobReporter reporter_;
  mutable std::mutex mu_;
  double t_last_ = 0;     // wall clock of the previous step (or of creation / the restore)
  double stall_ = 0;      // blocked since the previous step
  double loss_ = 0;
  uint64_t last_step_ = 0;
  double t_restore_begin_ = 0;
};

}  // namespace memento::torch_adapter
