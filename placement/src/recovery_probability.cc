#include "memento/placement/recovery_probability.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "memento/common/check.h"
#include "memento/placement/recoverability.h"

namespace memento::placement {
namespace {

using Real = long double;

// Failure-subset counts of a set of nodes, truncated at degree D: ok[j] (resp. lost[j]) is
// the number of j-subsets of the nodes whose failure leaves every shard recoverable (resp.
// loses one). ok[j] + lost[j] = C(nodes, j). Both are kept (never one as a difference of
// the other) so that a loss probability of 1e-30 keeps its relative precision.
struct Counts {
  int nodes = 0;
  std::vector<Real> ok;
  std::vector<Real> lost;
};

// Truncated product of polynomials a * b (degree <= d).
std::vector<Real> Mul(const std::vector<Real>& a, const std::vector<Real>& b, int d) {
  const int na = static_cast<int>(a.size());
  const int nb = static_cast<int>(b.size());
  std::vector<Real> out(std::min(d + 1, na + nb - 1), 0);
  for (int i = 0; i < na && i <= d; ++i) {
    if (a[i] == 0) continue;
    const int jmax = std::min(nb - 1, d - i);
    for (int j = 0; j <= jmax; ++j) out[i + j] += a[i] * b[j];
  }
  return out;
}

std::vector<Real> Add(std::vector<Real> a, const std::vector<Real>& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0);
  for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
  return a;
}

// Disjoint union of two node sets: a failure set is recoverable iff both parts are.
// ok = ok_a ok_b; lost = lost_a (ok_b + lost_b) + ok_a lost_b (all terms positive).
Counts Combine(const Counts& a, const Counts& b, int d) {
  Counts out;
  out.nodes = a.nodes + b.nodes;
  out.ok = Mul(a.ok, b.ok, d);
  out.lost = Add(Mul(a.lost, Add(b.ok, b.lost), d), Mul(a.ok, b.lost, d));
  out.ok.resize(std::min(d, out.nodes) + 1, 0);
  out.lost.resize(out.ok.size(), 0);
  return out;
}

// `count` disjoint copies of `one`, by repeated squaring: O(d^2 log count).
Counts Power(Counts one, int64_t count, int d) {
  Counts result;
  result.ok = {1};
  result.lost = {0};
  while (count > 0) {
    if (count & 1) result = Combine(result, one, d);
    count >>= 1;
    if (count > 0) one = Combine(one, one, d);
  }
  return result;
}

// Ring group of g members where a shard is lost iff `copies` cyclically consecutive members
// failed. A j-subset with k = g - j >= 1 survivors is described, up to the g/k rotations
// that map it onto itself, by the composition of j into k gaps between survivors
// (# j-subsets = g/k * # compositions of j into k parts). It is recoverable iff every gap is
// < copies. With A_k (every part < copies) and V_k (some part >= copies) as generating
// polynomials of compositions into k parts, A_{k+1} = A_k (1 + .. + x^{copies-1}) and
// V_{k+1} = V_k / (1 - x) + A_k x^copies / (1 - x): both positive, and
// ok[j] = g/k A_k[j], lost[j] = g/k V_k[j].
Counts RingGroup(int g, int copies, int d) {
  Counts out;
  out.nodes = g;
  const int top = std::min(d, g);
  out.ok.assign(top + 1, 0);
  out.lost.assign(top + 1, 0);
  out.ok[0] = 1;
  if (top == g) out.lost[g] = 1;  // every member failed
  const int jmax = std::min(d, g - 1);
  if (jmax < 1) return out;
  // One part: A_1 = 1 + .. + x^{copies-1}, V_1 = x^copies + x^{copies+1} + ...
  Counts part;
  part.nodes = jmax;  // compositions reach any degree <= jmax
  part.ok.assign(jmax + 1, 0);
  part.lost.assign(jmax + 1, 0);
  for (int s = 0; s <= jmax; ++s) (s < copies ? part.ok : part.lost)[s] = 1;
  // Concatenating compositions multiplies (A, V) pairs exactly as Combine does.
  Counts comp = Power(part, g - jmax, jmax);
  for (int k = g - jmax; k <= g - 1; ++k) {
    const int j = g - k;
    const Real rot = static_cast<Real>(g) / static_cast<Real>(k);
    if (j < static_cast<int>(comp.ok.size())) {
      out.ok[j] = rot * comp.ok[j];
      out.lost[j] = rot * comp.lost[j];
    }
    if (k == g - 1) break;
    // One more part: A *= (1 + .. + x^{copies-1}); V = V/(1-x) + A x^copies/(1-x).
    std::vector<Real> a(jmax + 1, 0);
    std::vector<Real> v(jmax + 1, 0);
    comp.ok.resize(jmax + 1, 0);
    comp.lost.resize(jmax + 1, 0);
    Real v_prefix = 0;
    Real a_prefix = 0;  // sum of comp.ok[0 .. s - copies]
    for (int s = 0; s <= jmax; ++s) {
      // The window's terms are added each time (copies is small): a running
      // sum that subtracts the term leaving it cancels where the terms span
      // hundreds of orders of magnitude, and went negative.
      Real window = 0;
      for (int t = std::max(0, s - copies + 1); t <= s; ++t) window += comp.ok[t];
      a[s] = window;
      v_prefix += comp.lost[s];
      if (s >= copies) a_prefix += comp.ok[s - copies];
      v[s] = v_prefix + a_prefix;
    }
    comp.ok = std::move(a);
    comp.lost = std::move(v);
  }
  return out;
}

// Counts of one group, truncated at degree d.
Counts GroupCounts(const ProtectionGroup& grp, int d) {
  const int g = grp.size();
  if (grp.kind == GroupKind::kReplica && g > grp.copies) return RingGroup(g, grp.copies, d);
  // Otherwise a j-subset is recoverable iff j <= tolerance: every C(g, j) subset is ok or
  // every one is lost.
  int tolerance = 0;
  if (grp.kind == GroupKind::kErasure) tolerance = grp.parity;
  if (grp.kind == GroupKind::kReplica) tolerance = g - 1;
  Counts out;
  out.nodes = g;
  const int top = std::min(d, g);
  out.ok.assign(top + 1, 0);
  out.lost.assign(top + 1, 0);
  Real choose = 1;  // C(g, j)
  for (int j = 0; j <= top; ++j) {
    (j <= tolerance ? out.ok : out.lost)[j] = choose;
    choose = choose * static_cast<Real>(g - j) / static_cast<Real>(j + 1);
  }
  return out;
}

// Largest natural log of a count that the arithmetic above may meet without overflow.
Real MaxLogCount() { return std::log(std::numeric_limits<Real>::max()) - 64; }

Real LogChoose(int n, int k) {
  return std::lgamma(static_cast<Real>(n) + 1) - std::lgamma(static_cast<Real>(k) + 1) -
         std::lgamma(static_cast<Real>(n - k) + 1);
}

// log of the largest binomial coefficient C(m, i), i <= d, that Counts of m nodes reach.
Real LogLargestCount(int m, int d) { return LogChoose(m, std::min(d, m / 2)); }

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

// IsRecoverable for a failure set given as a list (and as a mask), visiting only the groups
// of the failed nodes. `erasure_failed` is per-group scratch, all zero on entry and exit.
bool FailedSetRecoverable(const GroupLayout& layout, const std::vector<int>& failed,
                          const std::vector<char>& mask, std::vector<int>& erasure_failed) {
  bool ok = true;
  for (int node : failed) {
    const int g = layout.group_of(node);
    const ProtectionGroup& grp = layout.group(g);
    if (grp.kind == GroupKind::kUnprotected) {
      ok = false;
    } else if (grp.kind == GroupKind::kErasure) {
      if (++erasure_failed[g] > grp.parity) ok = false;
    } else {
      // Lost iff `copies` cyclically consecutive members failed: the run through `node`.
      const int p = layout.position_of(node);
      int run = 1;
      for (int i = 1; i < grp.copies && mask[layout.MemberAt(g, p - i + grp.size())]; ++i) ++run;
      for (int i = 1; i < grp.copies && mask[layout.MemberAt(g, p + i)]; ++i) ++run;
      if (run >= grp.copies) ok = false;
    }
    if (!ok) break;
  }
  for (int node : failed) erasure_failed[layout.group_of(node)] = 0;
  return ok;
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
  // At p = 0 (or 1) the bound is exactly 0 (1); center - half leaves rounding
  // noise (3e-18) that reads as a probability.
  e.ci_low = successes == 0 ? 0.0 : std::max(0.0, center - half);
  e.ci_high = successes == trials ? 1.0 : std::min(1.0, center + half);
  return e;
}

Result<ExactRecovery> ExactRecoveryProbabilities(const GroupLayout& layout, int max_failures) {
  const int n = layout.num_nodes();
  if (max_failures < 0 || max_failures > n) {
    return Status::InvalidArgument("failures = " + std::to_string(max_failures) + " (need 0.." +
                                   std::to_string(n) + ")");
  }
  const int d = max_failures;
  // The ring recursion meets C(g + d - 1, d), the products C(n, d): both must fit.
  if (LogLargestCount(n + d, d) > MaxLogCount()) {
    return Status::InvalidArgument(
        "exact recovery probability for up to " + std::to_string(d) + " failures of " +
        std::to_string(n) + " nodes needs C(" + std::to_string(n) + ", " + std::to_string(d) +
        "), beyond the floating-point range; ask for fewer failures or use Monte Carlo");
  }
  // Identical groups (same kind, size and tolerance) are raised to their multiplicity.
  std::map<std::tuple<int, int, int, int>, int64_t> kinds;
  for (const ProtectionGroup& grp : layout.groups()) {
    ++kinds[{static_cast<int>(grp.kind), grp.size(), grp.copies, grp.parity}];
  }
  Counts total;
  total.ok = {1};
  total.lost = {0};
  for (const ProtectionGroup& grp : layout.groups()) {
    auto it = kinds.find({static_cast<int>(grp.kind), grp.size(), grp.copies, grp.parity});
    if (it == kinds.end()) continue;  // already multiplied in
    total = Combine(total, Power(GroupCounts(grp, d), it->second, d), d);
    kinds.erase(it);
  }
  ExactRecovery out;
  out.recover.resize(d + 1);
  out.lose.resize(d + 1);
  for (int f = 0; f <= d; ++f) {
    const Real ok = f < static_cast<int>(total.ok.size()) ? total.ok[f] : 0;
    const Real lost = f < static_cast<int>(total.lost.size()) ? total.lost[f] : 0;
    const Real all = ok + lost;  // C(n, f)
    MEMENTO_CHECK(all > 0);
    out.recover[f] = static_cast<double>(ok / all);
    out.lose[f] = static_cast<double>(lost / all);
  }
  return out;
}

Result<double> ExactRecoveryProbability(const GroupLayout& layout, int failures) {
  auto curve = ExactRecoveryProbabilities(layout, failures);
  if (!curve.ok()) return curve.status();
  return curve->recover[failures];
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
  std::vector<int> failed(failures);
  std::vector<int> erasure_failed(layout.groups().size(), 0);
  uint64_t ok = 0;
  for (uint64_t t = 0; t < trials; ++t) {
    for (int i = 0; i < failures; ++i) {  // partial Fisher-Yates
      const int j = i + static_cast<int>(Below(rng, n - i));
      std::swap(order[i], order[j]);
      mask[order[i]] = 1;
      failed[i] = order[i];
    }
    ok += FailedSetRecoverable(layout, failed, mask, erasure_failed) ? 1 : 0;
    for (int i = 0; i < failures; ++i) mask[order[i]] = 0;
  }
  return WilsonInterval(ok, trials, z);
}

Result<double> ExactRackLossProbability(const GroupLayout& layout, const Topology& topology,
                                        int racks_lost) {
  auto rack_nodes = RackNodes(layout, topology, racks_lost);
  if (!rack_nodes.ok()) return rack_nodes.status();
  const std::vector<std::vector<int>> racks = std::move(rack_nodes).value();
  const int r = static_cast<int>(racks.size());
  if (LogChoose(r, racks_lost) > std::log(1e6L)) {
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
  auto rack_nodes = RackNodes(layout, topology, racks_lost);
  if (!rack_nodes.ok()) return rack_nodes.status();
  const std::vector<std::vector<int>> racks = std::move(rack_nodes).value();
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
