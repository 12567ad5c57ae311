#include "launch_progress.h"

namespace memento::torch_adapter {

LaunchProgress::LaunchProgress(int rank, uint64_t total_steps)
    : reporter_(launch::JobReporter::FromEnv(rank)), t_last_(launch::JobReporter::Now()) {
  reporter_.Start(total_steps);
}

void LaunchProgress::RestoreBegin() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  t_restore_begin_ = launch::JobReporter::Now();
  reporter_.RestoreBegin();
}

void LaunchProgress::Restored(const Result<runtime::RestoreReport>& report) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  const double now = launch::JobReporter::Now();
  reporter_.Restored(report, t_restore_begin_ > 0 ? t_restore_begin_ : now, now, "");
  if (report.ok()) last_step_ = report->version;
  // The first step after a restore is timed from its end, not from the
  // process's start: the launcher takes the step time for recompute costs.
  t_last_ = now;
  stall_ = 0;
}

void LaunchProgress::AddStall(double seconds) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  stall_ += seconds;
}

void LaunchProgress::SetLoss(double loss) {
  std::lock_guard<std::mutex> lock(mu_);
  loss_ = loss;
}

void LaunchProgress::Step(uint64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  last_step_ = step;
  if (!active()) return;
  const double now = launch::JobReporter::Now();
  reporter_.Step(step, loss_, now - t_last_, stall_);
  t_last_ = now;
  stall_ = 0;
}

void LaunchProgress::Done(const std::string& state_hash) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  reporter_.Done(last_step_, state_hash);
}

uint64_t LaunchProgress::last_step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_step_;
}

}  // namespace memento::torch_adapter
