// Event-driven simulation of a training job under the failure process of goodput_model.h,
// the independent check of its closed form.
//
// Each replicate simulates `years` of wall time. Failures are drawn as Poisson events of
// each kind; the lost nodes are drawn (a random node, the nodes of a random rack, or
// `multi_event_nodes` distinct random nodes) and assessed against the scheme's real
// GroupLayout (ServedByMemory), not against the closed-form probabilities. Saves, commits
// (protect_s after the save point) and durable versions (persist_s after every p-th save
// point, by progress) are events; a failure cancels the commits and persists in flight,
// rolls the job back to the last committed version (memory serves) or the last durable
// one, and starts a recovery (relaunch + source time) that a further failure restarts
// (and, when memory cannot serve that one, redirects to the durable version). Goodput =
// progress reached at the end * T / wall time.
//
// Replicate r draws from std::mt19937_64 seeded with (seed, r), so results are
// reproducible. The interval is mean ± z * sd / sqrt(replicates) (normal approximation;
// use >= 20 replicates for a meaningful interval).
//
// Thread-safety: a pure function. Cost: O(events) per replicate: saves (3 per save
// interval) plus failures, each failure O(nodes lost * log).
#pragma once

#include <cstdint>
#include <vector>

#include "memento/common/status.h"
#include "memento/placement/goodput_model.h"

namespace memento::placement {

struct SimulationOptions {
  double years = 1;     // simulated wall time per replicate (365-day years)
  int replicates = 20;  // independent replicates (>= 2)
  uint64_t seed = 1;
  double z = 1.959963984540054;  // interval half-width in standard errors (95 %)
};

struct SimulationResult {
  double goodput = 0;  // mean over replicates
  double ci_low = 0, ci_high = 0;
  std::vector<double> goodput_per_replicate;
  // Means over replicates, per day of wall time.
  double failures_per_day = 0;
  double memory_served_fraction = 0;  // of all failures, during a recovery too
  double stall_s_per_day = 0;
  double lost_s_per_day = 0;
  double recovery_s_per_day = 0;
};

// InvalidArgument on invalid inputs (ValidateInputs, years <= 0, replicates < 2).
Result<SimulationResult> SimulateGoodput(const JobShape& job, const FailureProcess& failures,
                                         const CheckpointCosts& costs, const CheckpointPlan& plan,
                                         const SimulationOptions& options);

}  // namespace memento::placement
