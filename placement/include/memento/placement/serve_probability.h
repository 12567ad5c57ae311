// Probability that memory can serve a failure: the scheme's layout for a job of N nodes
// (racks of `nodes_per_rack` nodes when racks fail, see TopologyFor), and P(every shard can be
// rebuilt from memory) for one random node lost, one random rack lost and
// `multi_event_nodes` random nodes lost.
//
// The model only needs few simultaneous failures, so the probabilities are exact closed forms
// per group, truncated at f failures: P(f) = [x^f] prod_g A_g(x) / C(N, f), A_g(x) =
// sum_{j <= f} a_g(j) x^j, a_g(j) = recoverable j-subsets of group g (C(g, j) up to the
// tolerance of a mirror or erasure group; for a ring of g members with M copies, cyclic
// arrangements of j failures with no M consecutive: g/(g-j) * #compositions of j into g-j
// parts below M, by inclusion-exclusion). Cost O(groups * f^2): 100,000 nodes in
// milliseconds; the same numbers as ExactRecoveryProbability (recovery_probability.h), which
// is O(N^2) over all f. Rack losses: every rack assessed with ServedByMemory, O(N) in all.
//
// Thread-safety: pure functions. Cost: one GroupLayout::Build plus the forms above.
#pragma once

#include <vector>

#include "memento/common/status.h"
#include "memento/placement/goodput_model.h"
#include "memento/placement/group_layout.h"
#include "memento/placement/scheme.h"
#include "memento/placement/topology.h"

namespace memento::placement {

// The topology the model assumes: N uniform nodes; when racks fail (failures.rack_mtbf_s
// finite), ceil(N / nodes_per_rack) racks with node i in rack i mod racks. Striping makes
// runs of consecutive nodes rack-disjoint, which is what GroupLayout::Build arranges for
// racks of neighbouring nodes too (rack-aware groups), but in O(N) instead of its search.
Result<Topology> TopologyFor(int nodes, const FailureProcess& failures);

// ServeProbabilities of `scheme` on TopologyFor(nodes, failures). Kinds of events that do
// not occur get probability 1. InvalidArgument when the scheme cannot protect N nodes.
Result<ServeProbabilities> ComputeServeProbabilities(const Scheme& scheme, int nodes,
                                                     const FailureProcess& failures);
// The same on a layout built already (GroupLayout::Build on `topology`, which is
// TopologyFor(N, failures)): a caller that needs the layout for more does not build it twice.
Result<ServeProbabilities> ComputeServeProbabilities(const GroupLayout& layout,
                                                     const Topology& topology,
                                                     const FailureProcess& failures);

// P(every shard rebuildable | `failures` uniformly random nodes lost), exact, for layouts of
// any size; InvalidArgument unless 0 <= failures <= min(N, kMaxTruncatedFailures).
inline constexpr int kMaxTruncatedFailures = 64;
Result<double> FewFailuresRecoveryProbability(const GroupLayout& layout, int failures);

// P(every shard rebuildable | one uniformly random rack lost): the share of racks whose loss
// memory can serve. InvalidArgument when the topology has no racks or does not match.
Result<double> OneRackLossProbability(const GroupLayout& layout, const Topology& topology);

// Whether every shard can still be rebuilt from memory when the nodes in `failed` (distinct
// indices) are lost. Cost: O(|failed| log |failed|), independent of N, so that a simulation
// can assess every event of a year of a 100,000-node job.
bool ServedByMemory(const GroupLayout& layout, const std::vector<int>& failed);

}  // namespace memento::placement
