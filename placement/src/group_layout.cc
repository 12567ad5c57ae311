#include "memento/placement/group_layout.h"

#include <algorithm>
#include <map>
#include <set>

#include "memento/common/check.h"

namespace memento::placement {
namespace {

int Mod(int a, int n) { return ((a % n) + n) % n; }

// Group sizes for N nodes, in order (see the rules in group_layout.h).
std::vector<int> GroupSizes(const Scheme& s, int n) {
  std::vector<int> sizes;
  switch (s.kind()) {
    case SchemeKind::kNone:
      sizes.assign(n, 1);
      break;
    case SchemeKind::kReplica: {
      if (s.placement() == ReplicaPlacement::kRing) {
        sizes.push_back(n);
        break;
      }
      const int m = s.copies();
      const int q = n / m;
      const int r = n % m;
      if (r == 0) {
        sizes.assign(q, m);
      } else {
        sizes.assign(q - 1, m);  // q >= 1 since n >= m
        sizes.push_back(m + r);
      }
      break;
    }
    case SchemeKind::kXor:
    case SchemeKind::kReedSolomon: {
      const int g = s.data() + s.parity();
      const int q = n / g;
      const int r = n % g;
      if (q == 0) {
        sizes.push_back(n);
      } else if (r == 0) {
        sizes.assign(q, g);
      } else if (r >= s.parity() + 1) {
        sizes.assign(q, g);
        sizes.push_back(r);
      } else {
        sizes.assign(q - 1, g);
        sizes.push_back(g + r);
      }
      break;
    }
  }
  return sizes;
}

bool HasDuplicateRack(const Topology& t, const std::vector<int>& nodes) {
  std::set<int> seen;
  for (int n : nodes) {
    if (!seen.insert(t.rack(n)).second) return true;
  }
  return false;
}

int GroupConflicts(const Topology& t, const std::vector<std::vector<int>>& groups) {
  if (!t.has_racks()) return 0;
  int c = 0;
  for (const auto& g : groups) c += HasDuplicateRack(t, g) ? 1 : 0;
  return c;
}

// Groups that the loss of one rack breaks: one rack holds more of their
// nodes than the group tolerates (`tolerance` lost members).
int RackLossBreaks(const Topology& t, const std::vector<std::vector<int>>& groups, int tolerance) {
  if (!t.has_racks()) return 0;
  int broken = 0;
  for (const auto& g : groups) {
    std::map<int, int> per_rack;
    int most = 0;
    for (int node : g) most = std::max(most, ++per_rack[t.rack(node)]);
    broken += most > tolerance ? 1 : 0;
  }
  return broken;
}

// Windows of `m` consecutive ring members holding two nodes of one rack.
int RingConflicts(const Topology& t, const std::vector<int>& ring, int m) {
  if (!t.has_racks()) return 0;
  const int n = static_cast<int>(ring.size());
  const int windows = n == m ? 1 : n;
  int c = 0;
  for (int w = 0; w < windows; ++w) {
    std::vector<int> win;
    for (int i = 0; i < m; ++i) win.push_back(ring[(w + i) % n]);
    c += HasDuplicateRack(t, win) ? 1 : 0;
  }
  return c;
}

// Racks as node lists, largest first (ties: smaller rack id).
std::vector<std::vector<int>> RacksLargestFirst(const Topology& t) {
  std::vector<std::vector<int>> racks;
  for (int id : t.rack_ids()) racks.push_back(t.NodesInRack(id));
  std::stable_sort(racks.begin(), racks.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return racks;
}

std::vector<std::vector<int>> ConsecutiveGroups(const std::vector<int>& sizes) {
  std::vector<std::vector<int>> groups;
  int next = 0;
  for (int s : sizes) {
    std::vector<int> g(s);
    for (int i = 0; i < s; ++i) g[i] = next++;
    groups.push_back(std::move(g));
  }
  return groups;
}

// Gale-Ryser greedy: each node of a rack goes to the group with the most free places that
// has no node of that rack yet; a rack larger than the number of open groups spills over.
std::vector<std::vector<int>> RackAwareGroups(const Topology& t, const std::vector<int>& sizes) {
  const int ng = static_cast<int>(sizes.size());
  std::vector<int> free_places = sizes;
  std::vector<std::vector<int>> groups(ng);
  for (const auto& rack : RacksLargestFirst(t)) {
    std::vector<bool> used(ng, false);
    for (int node : rack) {
      int best = -1;
      for (int pass = 0; pass < 2 && best < 0; ++pass) {
        for (int g = 0; g < ng; ++g) {
          if (free_places[g] == 0 || (pass == 0 && used[g])) continue;
          if (best < 0 || free_places[g] > free_places[best]) best = g;
        }
      }
      MEMENTO_CHECK_GE(best, 0);
      groups[best].push_back(node);
      --free_places[best];
      used[best] = true;
    }
  }
  for (auto& g : groups) std::sort(g.begin(), g.end());
  std::sort(groups.begin(), groups.end());  // by smallest member
  return groups;
}

std::vector<int> RackInterleavedRing(const Topology& t) {
  const auto racks = RacksLargestFirst(t);
  std::vector<int> ring;
  for (size_t round = 0; ring.size() < static_cast<size_t>(t.num_nodes()); ++round) {
    for (const auto& rack : racks) {
      if (round < rack.size()) ring.push_back(rack[round]);
    }
  }
  return ring;
}

}  // namespace

Result<GroupLayout> GroupLayout::Build(const Topology& topology, const Scheme& scheme) {
  const int n = topology.num_nodes();
  // Propagated as is: the message is for the user, not a trace of this call.
  if (Status valid = scheme.ValidateFor(n); !valid.ok()) return valid;
  GroupLayout layout(scheme);
  std::vector<std::vector<int>> member_lists;
  const bool ring = scheme.is_replica() && scheme.placement() == ReplicaPlacement::kRing;
  if (ring) {
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    int conflicts = RingConflicts(topology, order, scheme.copies());
    if (conflicts > 0) {
      std::vector<int> interleaved = RackInterleavedRing(topology);
      const int c2 = RingConflicts(topology, interleaved, scheme.copies());
      if (c2 < conflicts) {
        order = std::move(interleaved);
        conflicts = c2;
      }
    }
    member_lists.push_back(std::move(order));
    layout.rack_conflicts_ = conflicts;
  } else {
    const std::vector<int> sizes = GroupSizes(scheme, n);
    member_lists = ConsecutiveGroups(sizes);
    int conflicts = GroupConflicts(topology, member_lists);
    if (conflicts > 0) {
      // First what a whole rack's loss breaks (a group of 3 replicas over 2
      // racks always holds two nodes of one rack, but may survive either
      // rack), then how many groups hold two nodes of one rack.
      const int tolerance = scheme.tolerance();
      auto rack_aware = RackAwareGroups(topology, sizes);
      const int c2 = GroupConflicts(topology, rack_aware);
      if (std::make_pair(RackLossBreaks(topology, rack_aware, tolerance), c2) <
          std::make_pair(RackLossBreaks(topology, member_lists, tolerance), conflicts)) {
        member_lists = std::move(rack_aware);
        conflicts = c2;
      }
    }
    layout.rack_conflicts_ = conflicts;
  }
  for (auto& members : member_lists) {
    ProtectionGroup g;
    g.members = std::move(members);
    switch (scheme.kind()) {
      case SchemeKind::kNone:
        g.kind = GroupKind::kUnprotected;
        break;
      case SchemeKind::kReplica:
        g.kind = GroupKind::kReplica;
        g.copies = scheme.copies();
        break;
      case SchemeKind::kXor:
      case SchemeKind::kReedSolomon:
        g.kind = GroupKind::kErasure;
        g.parity = scheme.parity();
        g.data = g.size() - g.parity;
        MEMENTO_CHECK_GE(g.data, 1);
        break;
    }
    layout.groups_.push_back(std::move(g));
  }
  layout.Index();
  return layout;
}

void GroupLayout::Index() {
  int n = 0;
  for (const auto& g : groups_) n += g.size();
  group_of_.assign(n, -1);
  position_of_.assign(n, -1);
  for (int gi = 0; gi < static_cast<int>(groups_.size()); ++gi) {
    for (int p = 0; p < groups_[gi].size(); ++p) {
      const int node = groups_[gi].members[p];
      MEMENTO_CHECK_EQ(group_of_.at(node), -1);
      group_of_[node] = gi;
      position_of_[node] = p;
    }
  }
}

int GroupLayout::MemberAt(int g, int pos) const {
  const ProtectionGroup& grp = groups_.at(g);
  return grp.members[Mod(pos, grp.size())];
}

std::vector<int> GroupLayout::ReplicaHolders(int owner) const {
  const ProtectionGroup& g = groups_.at(group_of(owner));
  std::vector<int> out;
  if (g.kind != GroupKind::kReplica) return out;
  const int p = position_of(owner);
  for (int i = 1; i < g.copies; ++i) out.push_back(g.members[(p + i) % g.size()]);
  return out;
}

int GroupLayout::ParityHolder(int g, int stripe, int parity_row) const {
  const ProtectionGroup& grp = groups_.at(g);
  MEMENTO_CHECK(grp.kind == GroupKind::kErasure);
  MEMENTO_CHECK(parity_row >= 0 && parity_row < grp.parity);
  MEMENTO_CHECK(stripe >= 0 && stripe < grp.size());
  return MemberAt(g, stripe + parity_row);
}

int GroupLayout::DataRowNode(int g, int stripe, int data_row) const {
  const ProtectionGroup& grp = groups_.at(g);
  MEMENTO_CHECK(grp.kind == GroupKind::kErasure);
  MEMENTO_CHECK(data_row >= 0 && data_row < grp.data);
  MEMENTO_CHECK(stripe >= 0 && stripe < grp.size());
  return MemberAt(g, stripe + grp.parity + data_row);
}

int GroupLayout::StripeOfPiece(int owner, int piece) const {
  const ProtectionGroup& grp = groups_.at(group_of(owner));
  MEMENTO_CHECK(grp.kind == GroupKind::kErasure);
  MEMENTO_CHECK(piece >= 0 && piece < grp.data);
  return Mod(position_of(owner) - grp.parity - piece, grp.size());
}

std::vector<std::pair<int, int>> GroupLayout::ParityRowsHeldBy(int node) const {
  const ProtectionGroup& grp = groups_.at(group_of(node));
  std::vector<std::pair<int, int>> out;
  if (grp.kind != GroupKind::kErasure) return out;
  for (int t = 0; t < grp.parity; ++t) {
    out.emplace_back(Mod(position_of(node) - t, grp.size()), t);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace memento::placement
