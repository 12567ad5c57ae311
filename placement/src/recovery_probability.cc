#include "memento/placement/recovery_probability.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "memento/common/check.h"
#include "memento/placement/recoverability.h"

namespace memento::placement {
namespace {

using Real = long double;

// log(k!) for k = 0..n.
std::vector<Real> LogFactorials(int n) {
  std::vector<Real> lf(n + 1, 0);
  for (int k = 2; k <= n; ++k) lf[k] = lf[k - 1] + std::log(static_cast<Real>(k));
  return lf;
}

Real LogChoose(const std::vector<Real>& lf, int n, int k) { return lf[n] - lf[k] - lf[n - k]; }

// Ring group of g members where a shard is lost iff `copies` cyclically consecutive members
// failed: q[j] = (# recoverable j-subsets) / C(g, j). With k = g - j >= 1 survivors the
// failures form k gaps between survivors, each < copies: count = g/k * W(k, j), W = number
// of compositions of j into k parts in [0, copies-1]. W is computed row by row (parts k),
// each row rescaled by its maximum so that no value overflows.
std::vector<Real> RingGroupProbabilities(int g, int copies, const std::vector<Real>& lf) {
  std::vector<Real> q(g + 1, 0);
  q[0] = 1;
  std::vector<Real> row(g + 1, 0);  // W(k, s) * exp(-scale), s = 0..g
  std::vector<Real> prefix(g + 2, 0);
  std::vector<Real> suffix(g + 2, 0);
  Real scale = 0;
  row[0] = 1;  // W(0, 0) = 1
  for (int k = 1; k <= g; ++k) {
    prefix[0] = 0;
    for (int s = 0; s <= g; ++s) prefix[s + 1] = prefix[s] + row[s];
    suffix[g + 1] = 0;
    for (int s = g; s >= 0; --s) suffix[s] = suffix[s + 1] + row[s];
    Real max_v = 0;
    for (int s = 0; s <= g; ++s) {
      // Window sum row[lo..s] as a difference of the smaller of the prefix or suffix sums, so
      // that the tiny values in either tail keep their relative precision.
      const int lo = std::max(0, s - (copies - 1));
      row[s] =
          prefix[s + 1] <= suffix[lo] ? prefix[s + 1] - prefix[lo] : suffix[lo] - suffix[s + 1];
      max_v = std::max(max_v, row[s]);
    }
    MEMENTO_CHECK(max_v > 0);
    for (int s = 0; s <= g; ++s) row[s] /= max_v;
    scale += std::log(max_v);
    const int j = g - k;
    if (j >= 1 && row[j] > 0) {
      const Real log_count = std::log(row[j]) + scale + std::log(static_cast<Real>(g)) -
                             std::log(static_cast<Real>(k));
      q[j] = std::min<Real>(1, std::exp(log_count - LogChoose(lf, g, j)));
    }
  }
  q[g] = 0;  // every member failed
  return q;
}

std::vector<Real> GroupProbabilities(const ProtectionGroup& grp, const std::vector<Real>& lf) {
  const int g = grp.size();
  std::vector<Real> q(g + 1, 0);
  switch (grp.kind) {
    case GroupKind::kUnprotected:
      q[0] = 1;
      break;
    case GroupKind::kErasure:
      for (int j = 0; j <= std::min(g, grp.parity); ++j) q[j] = 1;
      break;
    case GroupKind::kReplica:
      if (g == grp.copies) {
        for (int j = 0; j < g; ++j) q[j] = 1;
      } else {
        q = RingGroupProbabilities(g, grp.copies, lf);
      }
      break;
  }
  return q;
}

// p[f] = P(every group recoverable | f uniformly random failures), f = 0..N.
std::vector<Real> AllExact(const GroupLayout& layout) {
  const int n_total = layout.num_nodes();
  const std::vector<Real> lf = LogFactorials(n_total);
  std::vector<Real> p = {1};  // zero nodes so far
  int n = 0;
  for (const ProtectionGroup& grp : layout.groups()) {
    const int g = grp.size();
    const std::vector<Real> q = GroupProbabilities(grp, lf);
    std::vector<Real> next(n + g + 1, 0);
    for (int f = 0; f <= n + g; ++f) {
      const Real log_total = LogChoose(lf, n + g, f);
      Real sum = 0;
      for (int j = std::max(0, f - n); j <= std::min(g, f); ++j) {
        if (q[j] == 0 || p[f - j] == 0) continue;
        const Real w =
            std::exp(LogChoose(lf, n, f - j) + LogChoose(lf, g, j) - log_total);  // hypergeometric
        sum += p[f - j] * q[j] * w;
      }
      next[f] = std::min<Real>(1, sum);
    }
    p = std::move(next);
    n += g;
  }
  return p;
}

// Uniform integer in [0, bound) from a 64-bit generator, by rejection (no modulo bias, and
// the same sequence on every standard library).
uint64_t Below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % bound;
}

// Racks as node lists; checks the layout matches the topology.
Result<std::vector<std::vector<int>>> RackNodes(const GroupLayout& layout, const Topology& topology,
                                                int racks_lost) {
  if (!topology.has_racks()) {
    return Status::InvalidArgument("rack loss: the topology names no racks (give --racks)");
  }
  if (topology.num_nodes() != layout.num_nodes()) {
    return Status::InvalidArgument("rack loss: layout is for " +
                                   std::to_string(layout.num_nodes()) + " nodes, topology has " +
                                   std::to_string(topology.num_nodes()));
  }
  std::vector<std::vector<int>> racks;
  for (int id : topology.rack_ids()) racks.push_back(topology.NodesInRack(id));
  if (racks_lost < 0 || racks_lost > static_cast<int>(racks.size())) {
    return Status::InvalidArgument("rack loss: " + std::to_string(racks_lost) +
                                   " racks lost out of " + std::to_string(racks.size()) +
                                   " (need 0..racks)");
  }
  return racks;
}

}  // namespace

MonteCarloEstimate WilsonInterval(uint64_t successes, uint64_t trials, double z) {
  MEMENTO_CHECK_GE(trials, 1u);
  MEMENTO_CHECK_LE(successes, trials);
  MonteCarloEstimate e;
  e.trials = trials;
  e.successes = successes;
  const double n = static_cast<double>(trials);
  const double p = static_cast<double>(successes) / n;
  e.estimate = p;
  const double z2 = z * z;
  const double denom = 1 + z2 / n;
  const double center = (p + z2 / (2 * n)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom;
  e.ci_low = std::max(0.0, center - half);
  e.ci_high = std::min(1.0, center + half);
  return e;
}

std::vector<double> ExactRecoveryProbabilities(const GroupLayout& layout) {
  const std::vector<Real> p = AllExact(layout);
  return {p.begin(), p.end()};
}

Result<double> ExactRecoveryProbability(const GroupLayout& layout, int failures) {
  if (failures < 0 || failures > layout.num_nodes()) {
    return Status::InvalidArgument("failures = " + std::to_string(failures) + " (need 0.." +
                                   std::to_string(layout.num_nodes()) + ")");
  }
  return static_cast<double>(AllExact(layout)[failures]);
}

Result<MonteCarloEstimate> MonteCarloRecoveryProbability(const GroupLayout& layout, int failures,
                                                         uint64_t trials, uint64_t seed, double z) {
  const int n = layout.num_nodes();
  if (failures < 0 || failures > n) {
    return Status::InvalidArgument("failures = " + std::to_string(failures) + " (need 0.." +
                                   std::to_string(n) + ")");
  }
  if (trials < 1) return Status::InvalidArgument("trials must be >= 1");
  std::mt19937_64 rng(seed);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<char> mask(n, 0);
  uint64_t ok = 0;
  for (uint64_t t = 0; t < trials; ++t) {
    for (int i = 0; i < failures; ++i) {  // partial Fisher-Yates
      const int j = i + static_cast<int>(Below(rng, n - i));
      std::swap(order[i], order[j]);
      mask[order[i]] = 1;
    }
    ok += IsRecoverable(layout, mask) ? 1 : 0;
    for (int i = 0; i < failures; ++i) mask[order[i]] = 0;
  }
  return WilsonInterval(ok, trials, z);
}

Result<double> ExactRackLossProbability(const GroupLayout& layout, const Topology& topology,
                                        int racks_lost) {
  MEMENTO_ASSIGN_OR_RETURN(auto racks, RackNodes(layout, topology, racks_lost));
  const int r = static_cast<int>(racks.size());
  const std::vector<Real> lf = LogFactorials(r);
  if (LogChoose(lf, r, racks_lost) > std::log(1e6L)) {
    return Status::InvalidArgument("rack loss: C(" + std::to_string(r) + ", " +
                                   std::to_string(racks_lost) +
                                   ") subsets are too many to enumerate; use Monte Carlo");
  }
  std::vector<int> pick(racks_lost);
  std::iota(pick.begin(), pick.end(), 0);
  uint64_t total = 0;
  uint64_t ok = 0;
  std::vector<char> mask(layout.num_nodes(), 0);
  while (true) {
    std::fill(mask.begin(), mask.end(), 0);
    for (int i : pick) {
      for (int node : racks[i]) mask[node] = 1;
    }
    ++total;
    ok += IsRecoverable(layout, mask) ? 1 : 0;
    int i = racks_lost - 1;  // next combination in lexicographic order
    while (i >= 0 && pick[i] == r - racks_lost + i) --i;
    if (i < 0) break;
    ++pick[i];
    for (int k = i + 1; k < racks_lost; ++k) pick[k] = pick[k - 1] + 1;
  }
  return static_cast<double>(ok) / static_cast<double>(total);
}

Result<MonteCarloEstimate> MonteCarloRackLossProbability(const GroupLayout& layout,
                                                         const Topology& topology, int racks_lost,
                                                         uint64_t trials, uint64_t seed, double z) {
  MEMENTO_ASSIGN_OR_RETURN(auto racks, RackNodes(layout, topology, racks_lost));
  if (trials < 1) return Status::InvalidArgument("trials must be >= 1");
  const int r = static_cast<int>(racks.size());
  std::mt19937_64 rng(seed);
  std::vector<int> order(r);
  std::iota(order.begin(), order.end(), 0);
  std::vector<char> mask(layout.num_nodes(), 0);
  uint64_t ok = 0;
  for (uint64_t t = 0; t < trials; ++t) {
    std::fill(mask.begin(), mask.end(), 0);
    for (int i = 0; i < racks_lost; ++i) {
      const int j = i + static_cast<int>(Below(rng, r - i));
      std::swap(order[i], order[j]);
      for (int node : racks[order[i]]) mask[node] = 1;
    }
    ok += IsRecoverable(layout, mask) ? 1 : 0;
  }
  return WilsonInterval(ok, trials, z);
}

}  // namespace memento::placement
