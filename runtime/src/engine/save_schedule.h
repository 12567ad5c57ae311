// SaveSchedule: which Save(step) calls take a checkpoint (Config::interval),
// the same decision on every rank.
//
// Every call (interval 1, the default) or the steps that are multiples of N
// (interval N) need nothing but the step. With interval auto the schedule
// measures, on each rank, the compute time per step (the time between Save
// calls less the time the application thread was blocked in Save and
// WaitSnapshot), the stall of a save (the blocked time from a saving Save
// call to the next Save call) and the protect time (from a saving Save call
// to the version's commit), each smoothed. Ranks measure different numbers,
// so they never decide from their own: after every version that commits on
// every rank, the commit thread allgathers the ranks' measurements (one
// Allgather of 32 bytes per rank, right after the commit agreement, so it is
// entered by exactly the ranks that entered the commit) and feeds the
// element-wise maximum (the slowest rank sets the pace) to an IntervalTuner
// (placement/interval_tuner.h). Every rank's tuner gets the same sequence of
// numbers and so chooses the same interval. A saving Save waits for the
// previous version's commit before it starts (Save's contract), so the
// interval it reads to schedule the next save is the one agreed at the last
// commit on every rank: the next saved step is this step + that interval, and
// the calls in between return at once without touching the engine.
//
// Thread-safety: Offer, Saved, SaveReturned, AddBlocked and Reset from the
// application thread; Agree from the commit thread; WouldSave and stats from
// any thread. One mutex, never held while calling out (transport, log).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "memento/common/status.h"
#include "memento/placement/interval_tuner.h"
#include "memento/runtime/checkpointer.h"
#include "memento/runtime/transport.h"

namespace memento::runtime {

class SaveSchedule {
 public:
  // `interval`: Config::interval (Config::kAutoInterval = auto); `node_mtbf_h`
  // is used by auto only. `clock` (borrowed; null = the steady clock) times
  // the auto measurements.
  SaveSchedule(int interval, double node_mtbf_h, placement::TunerClock* clock);

  bool automatic() const { return automatic_; }

  // Whether Offer(step) would save `step` (no side effects).
  bool WouldSave(uint64_t step) const;
  // A Save(step) call begins: measures (auto; a step not above the last one
  // is not measured) and decides whether to save it, and counts.
  bool Offer(uint64_t step);
  // The offered step's version starts: the next save is this step plus the
  // interval agreed at the last commit.
  void Saved(uint64_t step);
  // A saving Save call returns: its blocked time counts as stall (auto).
  void SaveReturned();
  // Time the application thread was blocked in WaitSnapshot (auto).
  void AddBlocked(double seconds);
  double Now();

  // Commit thread, after a version committed on every rank: agrees the
  // measurements across ranks and re-tunes (auto; no-op otherwise). `nodes`:
  // the job's node count, for the failure rate. A failed Allgather is
  // returned (the transport is then unusable).
  Status Agree(Transport* transport, int nodes, uint64_t version);

  // After a restore: every rank starts over alike (the next offer saves, the
  // initial interval, no measurements), whatever this process did before.
  void Reset();

  IntervalStats stats() const;

 private:
  struct Measured {
    double step_s = 0, stall_s = 0, protect_s = 0;
    bool step = false, stall = false, protect = false;
  };
  static void Smooth(double* average, bool* seen, double value);
  std::unique_ptr<placement::IntervalTuner> MakeTuner();

  const bool automatic_;
  const int fixed_;  // interval when not automatic
  const double node_mtbf_h_;
  placement::SteadyTunerClock steady_;
  placement::TunerClock* clock_;

  mutable std::mutex mu_;
  // Decisions.
  bool have_offer_ = false;
  uint64_t last_offer_ = 0;
  bool have_saved_ = false;
  uint64_t next_save_ = 0;
  bool last_saved_ = false;
  uint64_t saves_ = 0, skipped_ = 0;
  // Measurements of this rank (auto).
  double offer_time_ = 0;             // clock at the last offer
  double blocked_since_offer_ = 0;    // blocked time since then
  bool last_offer_saved_ = false;
  bool version_started_ = false;
  double version_start_ = 0;          // clock at the offer of the version in flight
  Measured mine_;
  // Agreed (auto): identical on every rank.
  std::unique_ptr<placement::IntervalTuner> tuner_;
  Measured agreed_;
  size_t logged_changes_ = 0;
};

}  // namespace memento::runtime
