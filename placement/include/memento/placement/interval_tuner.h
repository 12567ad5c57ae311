// IntervalTuner: decides which training steps to save, from measured step time, stall and
// protect time and the configured failure rate, and re-tunes as they drift (CheckFreq's
// idea, with memory protection on peers).
//
// The caller offers every step (ShouldSave(step) at each step boundary) and reports what a
// save cost (RecordStall when the snapshot landed, RecordProtect when the version
// committed). The tuner measures the step time from its clock between offers (less the
// stalls reported in between), smooths step, stall and protect times with an exponential
// moving average, and picks the interval k (in steps) that maximises the closed-form
// goodput of goodput_model.h for one rollback-to-memory failure process of rate
// `failure_rate_per_s`: about sqrt(2 stall / rate) / step, and never a save cycle shorter
// than the protect time (no two protects in flight). The interval changes only when the
// optimum moves by more than `hysteresis` (relative); each change is recorded.
//
// Before the first measurements the interval is `initial_interval_steps`. With a failure
// rate of 0 nothing is lost by waiting: the interval goes to `max_interval_steps`.
//
// Thread-safety: not thread-safe; one owner (the checkpointer's caller thread).
// Cost: O(1) per offer; a re-tune is O(log max_interval_steps) closed-form evaluations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memento/common/status.h"

namespace memento::placement {

// Seconds from an arbitrary origin; injectable so that tests drive time.
class TunerClock {
 public:
  virtual ~TunerClock() = default;
  virtual double NowSeconds() = 0;
};

// std::chrono::steady_clock.
class SteadyTunerClock final : public TunerClock {
 public:
  double NowSeconds() override;
};

struct IntervalTunerOptions {
  double failure_rate_per_s = 0;    // failures of the whole job per second (>= 0)
  int initial_interval_steps = 10;  // until the first measurements
  int min_interval_steps = 1;
  int max_interval_steps = 1 << 20;
  double smoothing = 0.2;      // EWMA weight of a new measurement, in (0, 1]
  double hysteresis = 0.1;     // relative move of the optimum that changes the interval
  int retune_every_steps = 1;  // re-evaluate the optimum at most this often (offers)

  // InvalidArgument names the field.
  Status Validate() const;
};

struct IntervalChange {
  int64_t step = 0;  // the offer at which it changed
  int from_steps = 0;
  int to_steps = 0;
  double step_s = 0;  // the smoothed measurements behind it
  double stall_s = 0;
  double protect_s = 0;
  double failure_rate_per_s = 0;
  double expected_goodput = 0;  // closed form at the new interval

  std::string ToString() const;  // one log line
};

class IntervalTuner {
 public:
  // `clock` is borrowed and must outlive the tuner. InvalidArgument on bad options.
  static Result<IntervalTuner> Create(const IntervalTunerOptions& options, TunerClock* clock);

  // Offer of step `step` (increasing; gaps allowed). True when this step is to be saved:
  // the first offer, and then whenever `interval_steps()` steps have passed since the last
  // saved step.
  bool ShouldSave(int64_t step);

  // What the last save cost: the time the caller was blocked, and the time from the save
  // call until the version was committed (>= stall). Negative values are ignored.
  void RecordStall(double stall_s);
  void RecordProtect(double protect_s);
  // A new configured (or observed) failure rate of the job, per second.
  void SetFailureRate(double failure_rate_per_s);
  // Measurements taken elsewhere (already smoothed, e.g. agreed across the ranks of a job)
  // replace the tuner's own, and the interval is re-tuned at once (hysteresis applies) as of
  // offer `step`. Deterministic: tuners with the same options given the same sequence of
  // Update and SetFailureRate calls choose the same intervals. Non-positive step_s or a
  // negative cost is ignored.
  void Update(int64_t step, double step_s, double stall_s, double protect_s);

  int interval_steps() const { return interval_; }
  double step_s() const { return step_s_; }
  double stall_s() const { return stall_s_; }
  double protect_s() const { return protect_s_; }
  const std::vector<IntervalChange>& changes() const { return changes_; }

 private:
  IntervalTuner(const IntervalTunerOptions& options, TunerClock* clock)
      : options_(options), clock_(clock), interval_(options.initial_interval_steps) {}
  void Smooth(double* average, bool* seen, double value) const;
  void Retune(int64_t step);

  IntervalTunerOptions options_;
  TunerClock* clock_;
  int interval_;
  bool have_offer_ = false;
  int64_t last_offer_step_ = 0;
  double last_offer_time_ = 0;
  double stall_since_offer_ = 0;
  bool have_saved_ = false;
  int64_t last_saved_step_ = 0;
  int64_t offers_since_retune_ = 0;
  bool step_seen_ = false, stall_seen_ = false, protect_seen_ = false;
  double step_s_ = 0, stall_s_ = 0, protect_s_ = 0;
  std::vector<IntervalChange> changes_;
};

}  // namespace memento::placement
