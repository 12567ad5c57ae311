#include "memento/placement/interval_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "memento/placement/goodput_model.h"

namespace memento::placement {

double SteadyTunerClock::NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status IntervalTunerOptions::Validate() const {
  if (!(std::isfinite(failure_rate_per_s) && failure_rate_per_s >= 0))
    return Status::InvalidArgument("failure_rate_per_s must be a finite number >= 0");
  if (min_interval_steps < 1) return Status::InvalidArgument("min_interval_steps must be >= 1");
  if (max_interval_steps < min_interval_steps)
    return Status::InvalidArgument("max_interval_steps must be >= min_interval_steps");
  if (initial_interval_steps < min_interval_steps || initial_interval_steps > max_interval_steps)
    return Status::InvalidArgument(
        "initial_interval_steps must be in [min_interval_steps, max_interval_steps]");
  if (!(smoothing > 0 && smoothing <= 1))
    return Status::InvalidArgument("smoothing must be in (0, 1]");
  if (!(hysteresis >= 0 && std::isfinite(hysteresis)))
    return Status::InvalidArgument("hysteresis must be >= 0");
  if (retune_every_steps < 1) return Status::InvalidArgument("retune_every_steps must be >= 1");
  return Status::Ok();
}

std::string IntervalChange::ToString() const {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "checkpoint interval %d -> %d steps at step %lld (step %.4g s, stall %.4g s, "
                "protect %.4g s, failures %.4g /day, expected goodput %.4f)",
                from_steps, to_steps, static_cast<long long>(step), step_s, stall_s, protect_s,
                failure_rate_per_s * kSecondsPerDay, expected_goodput);
  return buf;
}

Result<IntervalTuner> IntervalTuner::Create(const IntervalTunerOptions& options,
                                            TunerClock* clock) {
  MEMENTO_RETURN_IF_ERROR(options.Validate());
  if (clock == nullptr) return Status::InvalidArgument("clock must not be null");
  return IntervalTuner(options, clock);
}

void IntervalTuner::Smooth(double* average, bool* seen, double value) const {
  if (!*seen) {
    *average = value;
    *seen = true;
  } else {
    *average += options_.smoothing * (value - *average);
  }
}

bool IntervalTuner::ShouldSave(int64_t step) {
  const double now = clock_->NowSeconds();
  if (have_offer_ && step > last_offer_step_) {
    const double compute = now - last_offer_time_ - stall_since_offer_;
    if (compute > 0) {
      Smooth(&step_s_, &step_seen_, compute / static_cast<double>(step - last_offer_step_));
    }
  }
  have_offer_ = true;
  last_offer_step_ = step;
  last_offer_time_ = now;
  stall_since_offer_ = 0;
  if (++offers_since_retune_ >= options_.retune_every_steps) {
    offers_since_retune_ = 0;
    Retune(step);
  }
  if (!have_saved_ || step - last_saved_step_ >= interval_) {
    have_saved_ = true;
    last_saved_step_ = step;
    return true;
  }
  return false;
}

void IntervalTuner::RecordStall(double stall_s) {
  if (!(stall_s >= 0)) return;
  stall_since_offer_ += stall_s;
  Smooth(&stall_s_, &stall_seen_, stall_s);
}

void IntervalTuner::RecordProtect(double protect_s) {
  if (!(protect_s >= 0)) return;
  Smooth(&protect_s_, &protect_seen_, protect_s);
}

void IntervalTuner::SetFailureRate(double failure_rate_per_s) {
  if (!(std::isfinite(failure_rate_per_s) && failure_rate_per_s >= 0)) return;
  options_.failure_rate_per_s = failure_rate_per_s;
}

void IntervalTuner::Update(int64_t step, double step_s, double stall_s, double protect_s) {
  if (!(step_s > 0 && stall_s >= 0 && protect_s >= 0)) return;
  if (!(std::isfinite(step_s) && std::isfinite(stall_s) && std::isfinite(protect_s))) return;
  step_s_ = step_s;
  stall_s_ = stall_s;
  protect_s_ = protect_s;
  step_seen_ = stall_seen_ = protect_seen_ = true;
  Retune(step);
}

void IntervalTuner::Retune(int64_t step) {
  if (!step_seen_ || !stall_seen_ || step_s_ <= 0) return;
  // One node whose every failure rolls back to memory: the save interval's trade-off
  // (stall per save against the work lost per failure) without the persist tier.
  const double rate = options_.failure_rate_per_s;
  JobShape job{1, 1, step_s_};
  FailureProcess failures;
  failures.node_mtbf_s = rate > 0 ? 1 / rate : kNever;
  CheckpointCosts costs;
  costs.stall_s = stall_s_;
  costs.protect_s = std::max(stall_s_, protect_seen_ ? protect_s_ : stall_s_);
  costs.persist_s = costs.protect_s;
  const ServeProbabilities all{1, 1, 1};
  auto best = OptimizeIntervals(job, failures, costs, all, Scheme::None(), false,
                                options_.max_interval_steps, 1);
  if (!best.ok()) return;
  const int target = std::clamp(best->plan.save_every_steps, options_.min_interval_steps,
                                options_.max_interval_steps);
  if (std::abs(target - interval_) <= options_.hysteresis * interval_) return;
  IntervalChange change;
  change.step = step;
  change.from_steps = interval_;
  change.to_steps = target;
  change.step_s = step_s_;
  change.stall_s = stall_s_;
  change.protect_s = costs.protect_s;
  change.failure_rate_per_s = rate;
  change.expected_goodput = best->estimate.goodput;
  changes_.push_back(change);
  interval_ = target;
}

}  // namespace memento::placement
