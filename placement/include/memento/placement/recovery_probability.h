// Recovery probability of a layout under random failures: exact and Monte Carlo.
//
// Exact, f uniformly random failed nodes: the number of f-subsets that leave every group
// recoverable is the coefficient of x^f in the product of the groups' polynomials
// sum_j a_g(j) x^j, a_g(j) = recoverable j-subsets of group g (C(g,j) for j <= tolerance in
// mirror / erasure groups; ring groups count cyclic arrangements without M consecutive
// failures through compositions of the failures into the gaps between survivors). The
// number of f-subsets that lose a shard is carried alongside as its own positive sum
// (never as C(N,f) minus the first), so a loss probability of 1e-30 is exact to ~1e-15
// relative, not rounded to 0. Polynomials are truncated at the largest f asked, and
// identical groups are multiplied by repeated squaring: O(F^2 log N) for F failures, e.g.
// milliseconds for N = 10^6, F = 64. The counts are long doubles, so C(N, F) must stay
// below ~1e4900 (any F for N <= ~15000; F up to ~900 for N = 10^6).
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

// Exact probabilities for f = 0..max_failures uniformly random failed nodes.
struct ExactRecovery {
  std::vector<double> recover;  // P(every shard recoverable | f failures)
  std::vector<double> lose;     // P(some shard lost | f failures) = 1 - recover[f]
};

// InvalidArgument unless 0 <= max_failures <= N and C(N, max_failures) is in range (above).
Result<ExactRecovery> ExactRecoveryProbabilities(const GroupLayout& layout, int max_failures);

// P(recoverable | f uniformly random failed nodes), as above.
Result<double> ExactRecoveryProbability(const GroupLayout& layout, int failures);

// Monte Carlo estimate of the same. InvalidArgument unless 0 <= f <= N and trials >= 1.
// Each trial checks only the groups its failed nodes belong to: O(trials * f * M) after
// O(N) setup.
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
