// Recovery probability of a layout under random failures: exact and Monte Carlo.
//
// Exact, f uniformly random failed nodes: the number of f-subsets that leave every group
// recoverable is the coefficient of x^f in the product of the groups' polynomials
// sum_j a_g(j) x^j, a_g(j) = recoverable j-subsets of group g (C(g,j) for j <= tolerance in
// mirror / erasure groups; ring groups count cyclic binary strings without M consecutive
// failures, by a transfer DP). The product is evaluated as a DP over groups that keeps
// probabilities (conditional on how many failures fall in the groups so far) in [0,1], with
// hypergeometric weights from log-factorials, so it stays exact to ~1e-15 for any N
// (tested to N = 4096). Cost: O(N^2) time, O(N) memory.
//
// Monte Carlo: `trials` independent draws of f distinct nodes (std::mt19937_64 seeded with
// `seed`, so the result is reproducible), with a Wilson score confidence interval.
//
// Correlated failures: `racks_lost` whole racks, uniformly among the topology's racks.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "memento/common/status.h"
#include "memento/placement/group_layout.h"
#include "memento/placement/topology.h"

namespace memento::placement {

// z for a two-sided 95 % interval.
inline constexpr double kZ95 = 1.959963984540054;

struct MonteCarloEstimate {
  uint64_t trials = 0;
  uint64_t successes = 0;
  double estimate = 0;  // successes / trials
  double ci_low = 0;    // Wilson score interval for confidence z
  double ci_high = 0;
};

// P(recoverable | f uniformly random failed nodes). InvalidArgument unless 0 <= f <= N.
Result<double> ExactRecoveryProbability(const GroupLayout& layout, int failures);

// P(recoverable | f failures) for every f = 0..N at once (the cost of one call above).
std::vector<double> ExactRecoveryProbabilities(const GroupLayout& layout);

// Monte Carlo estimate of the same. InvalidArgument unless 0 <= f <= N and trials >= 1.
// Cost: O(trials * (f + N)).
Result<MonteCarloEstimate> MonteCarloRecoveryProbability(const GroupLayout& layout, int failures,
                                                         uint64_t trials, uint64_t seed,
                                                         double z = kZ95);

// P(recoverable | `racks_lost` whole racks fail, uniformly random among the racks), by
// enumerating the rack subsets. InvalidArgument without racks, when racks_lost is out of
// [0, racks], when the layout is not for this topology, or when there are more than 10^6
// subsets (use the Monte Carlo form).
Result<double> ExactRackLossProbability(const GroupLayout& layout, const Topology& topology,
                                        int racks_lost);
Result<MonteCarloEstimate> MonteCarloRackLossProbability(const GroupLayout& layout,
                                                         const Topology& topology, int racks_lost,
                                                         uint64_t trials, uint64_t seed,
                                                         double z = kZ95);

// Wilson score interval of `successes` out of `trials` (trials >= 1).
MonteCarloEstimate WilsonInterval(uint64_t successes, uint64_t trials, double z = kZ95);

}  // namespace memento::placement
