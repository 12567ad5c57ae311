#include "memento/placement/serve_probability.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace memento::placement {
namespace {

using Real = long double;

Real LogChoose(int n, int k) {
  if (k < 0 || k > n) return -INFINITY;
  return std::lgamma(static_cast<Real>(n) + 1) - std::lgamma(static_cast<Real>(k) + 1) -
         std::lgamma(static_cast<Real>(n - k) + 1);
}

Real Choose(int n, int k) { return k < 0 || k > n ? 0 : std::exp(LogChoose(n, k)); }

// Recoverable j-subsets of one group, j = 0..f.
std::vector<Real> GroupCounts(const ProtectionGroup& grp, int f) {
  const int g = grp.size();
  std::vector<Real> a(f + 1, 0);
  a[0] = 1;
  for (int j = 1; j <= std::min(f, g); ++j) {
    switch (grp.kind) {
      case GroupKind::kUnprotected:
        break;
      case GroupKind::kErasure:
        if (j <= grp.parity) a[j] = Choose(g, j);
        break;
      case GroupKind::kReplica: {
        if (g == grp.copies) {
          if (j < g) a[j] = Choose(g, j);
          break;
        }
        // Cyclic: k = g - j survivors split the j failures into k gaps, each < M; every
        // arrangement is counted k times over its g rotations: g/k * W(k, j).
        const int k = g - j;
        if (k == 0) break;
        const int m = grp.copies;
        Real w = 0;
        for (int i = 0; i <= k && i * m <= j; ++i) {
          const Real term = Choose(k, i) * Choose(j - i * m + k - 1, k - 1);
          w += (i % 2 == 0) ? term : -term;
        }
        a[j] = std::max<Real>(0, w * g / k);
        break;
      }
    }
  }
  return a;
}

}  // namespace

Result<double> FewFailuresRecoveryProbability(const GroupLayout& layout, int failures) {
  const int n = layout.num_nodes();
  if (failures < 0 || failures > n || failures > kMaxTruncatedFailures) {
    return Status::InvalidArgument("failures = " + std::to_string(failures) + " (need 0.." +
                                   std::to_string(std::min(n, kMaxTruncatedFailures)) + ")");
  }
  const int f = failures;
  // Coefficients scaled by 1/C(N, f) as they go would underflow nothing here: C(N, 64) for
  // N = 10^6 is ~1e295, inside long double's range.
  std::vector<Real> c(f + 1, 0);
  c[0] = 1;
  std::vector<Real> next(f + 1);
  for (const ProtectionGroup& grp : layout.groups()) {
    const std::vector<Real> a = GroupCounts(grp, f);
    std::fill(next.begin(), next.end(), 0);
    for (int i = 0; i <= f; ++i) {
      if (c[i] == 0) continue;
      for (int j = 0; i + j <= f; ++j) next[i + j] += c[i] * a[j];
    }
    c.swap(next);
  }
  const Real p = c[f] / std::exp(LogChoose(n, f));
  return static_cast<double>(std::clamp<Real>(p, 0, 1));
}

Result<double> OneRackLossProbability(const GroupLayout& layout, const Topology& topology) {
  if (!topology.has_racks()) return Status::InvalidArgument("rack loss: the topology has no racks");
  if (topology.num_nodes() != layout.num_nodes()) {
    return Status::InvalidArgument("rack loss: layout and topology differ in node count");
  }
  std::map<int, std::vector<int>> racks;
  for (int i = 0; i < topology.num_nodes(); ++i) racks[topology.rack(i)].push_back(i);
  int served = 0;
  for (const auto& [id, nodes] : racks) served += ServedByMemory(layout, nodes) ? 1 : 0;
  return static_cast<double>(served) / static_cast<double>(racks.size());
}

Result<Topology> TopologyFor(int nodes, const FailureProcess& failures) {
  if (failures.rack_mtbf_s == kNever || failures.nodes_per_rack <= 0) {
    return Topology::Uniform(nodes);
  }
  if (nodes < 1) return Status::InvalidArgument("nodes must be >= 1");
  // Node i in rack i mod R: consecutive groups are then rack-disjoint, as the groups that
  // GroupLayout::Build forms for racks of neighbouring nodes are, without its rack search.
  const int racks = (nodes + failures.nodes_per_rack - 1) / failures.nodes_per_rack;
  std::vector<NodeInfo> infos(nodes);
  char name[32];
  for (int i = 0; i < nodes; ++i) {
    std::snprintf(name, sizeof(name), "node%09d", i);
    infos[i] = NodeInfo{name, 1, i % racks};
  }
  return Topology::FromNodes(std::move(infos));
}

Result<ServeProbabilities> ComputeServeProbabilities(const Scheme& scheme, int nodes,
                                                     const FailureProcess& failures) {
  MEMENTO_ASSIGN_OR_RETURN(Topology topology, TopologyFor(nodes, failures));
  MEMENTO_ASSIGN_OR_RETURN(GroupLayout layout, GroupLayout::Build(topology, scheme));
  return ComputeServeProbabilities(layout, topology, failures);
}

Result<ServeProbabilities> ComputeServeProbabilities(const GroupLayout& layout,
                                                     const Topology& topology,
                                                     const FailureProcess& failures) {
  ServeProbabilities p{1, 1, 1};
  if (failures.node_mtbf_s != kNever) {
    MEMENTO_ASSIGN_OR_RETURN(p.node, FewFailuresRecoveryProbability(layout, 1));
  }
  if (topology.has_racks()) {
    MEMENTO_ASSIGN_OR_RETURN(p.rack, OneRackLossProbability(layout, topology));
  }
  if (failures.multi_events_per_day > 0) {
    const int most = std::min(kMaxTruncatedFailures, topology.num_nodes());
    if (failures.multi_event_nodes > most) {
      return Status::InvalidArgument(
          "multi_event_nodes = " + std::to_string(failures.multi_event_nodes) + " (at most " +
          std::to_string(most) + ": " + std::to_string(kMaxTruncatedFailures) +
          " and the job's nodes)");
    }
    MEMENTO_ASSIGN_OR_RETURN(p.multi,
                             FewFailuresRecoveryProbability(layout, failures.multi_event_nodes));
  }
  return p;
}

bool ServedByMemory(const GroupLayout& layout, const std::vector<int>& failed) {
  std::map<int, std::vector<int>> positions;  // group -> failed positions
  for (int n : failed) positions[layout.group_of(n)].push_back(layout.position_of(n));
  for (auto& [g, pos] : positions) {
    const ProtectionGroup& grp = layout.group(g);
    switch (grp.kind) {
      case GroupKind::kUnprotected:
        return false;
      case GroupKind::kErasure:
        if (static_cast<int>(pos.size()) > grp.parity) return false;
        break;
      case GroupKind::kReplica: {
        // The shard of position q is lost iff positions q..q+M-1 (mod g) all failed.
        if (static_cast<int>(pos.size()) < grp.copies) break;
        std::sort(pos.begin(), pos.end());
        for (int q : pos) {
          bool all = true;
          for (int d = 1; d < grp.copies && all; ++d) {
            all = std::binary_search(pos.begin(), pos.end(), (q + d) % grp.size());
          }
          if (all) return false;
        }
        break;
      }
    }
  }
  return true;
}

}  // namespace memento::placement
