// GroupLayout: which nodes protect each other, and the stripe geometry inside a group.
//
// A layout is computed on nodes and applies identically to every lane: lane r of node i
// is protected by lane r of the other nodes of i's group.
//
// Group formation (N nodes, scheme s):
//  * none: every node is its own unprotected group of 1.
//  * replica:M:group (Gemini): groups of M nodes mirror each other. When M does not divide
//    N, the first floor(N/M)-1 groups have M nodes and the last group takes the remaining
//    M + (N mod M) nodes with ring placement inside it (Gemini's "groups plus a ring over
//    the remainder"); with N < 2M that is one ring of all N nodes.
//  * replica:M:ring: one group of all N nodes; the shard of position p lives on positions
//    p..p+M-1 (mod N).
//    In every replica group of g >= M nodes the shard of position p lives on positions
//    p, p+1, .., p+M-1 (mod g); with g == M that is plain mirroring.
//  * xor:K / rs:K+M (G = K+M): groups of G nodes; a remainder r = N mod G with r >= M+1
//    forms a last partial group of r nodes (r-M data, same M parity); a remainder
//    1 <= r <= M (too small for one data node plus M parity) is folded into the previous
//    group, which then has K+r data nodes and M parity. With N < G there is one group of N.
//  Without racks, groups are consecutive runs of nodes in index order (docs/architecture.md §5);
//  the ring is the index order. With racks: if consecutive runs already keep every group (every
//  window of M ring neighbours) free of two nodes of one rack, they are kept. Otherwise groups of
//  the same sizes are filled rack by rack, largest rack first (ties: smaller rack id), each node of
//  a rack going to the group with the most free places that holds no node of that rack yet
//  (ties: lower group); this greedy (Gale-Ryser) finds rack-disjoint groups whenever they
//  exist. A ring is ordered by dealing the racks round-robin (largest first). Whichever
//  arrangement has fewer conflicts is used (ties: consecutive runs); rack_conflicts() says
//  how many remain. Members of a group are in increasing node index order, except a
//  replica:M:ring whose order was rack-interleaved (members are then in ring order).
//
// Erasure stripes in a group of G = K'+M nodes (positions 0..G-1): every node's shard is
// cut into K' pieces of P = ceil(max shard bytes in the group / K') bytes (piece i covers
// bytes [i*P, (i+1)*P) of the shard, zero-padded). There are G stripes; stripe j has
// parity rows t = 0..M-1 on positions (j+t) mod G and data rows r = 0..K'-1, row r being
// piece r of the node at position (j+M+r) mod G. So piece i of position p is in stripe
// (p-M-i) mod G, and every node holds M parity pieces: memory S + M*P ~ S(1 + M/K').
//
// Thread-safety: an immutable value. Cost: Build is O(N log N); lookups O(1) or O(M).
#pragma once

#include <vector>

#include "memento/common/status.h"
#include "memento/placement/scheme.h"
#include "memento/placement/topology.h"

namespace memento::placement {

enum class GroupKind { kUnprotected, kReplica, kErasure };

struct ProtectionGroup {
  GroupKind kind = GroupKind::kUnprotected;
  std::vector<int> members;  // node indices in position order
  int copies = 1;            // kReplica: copies per shard (M), members.size() >= copies
  int data = 1;              // kErasure: K' data rows per stripe (members.size() - parity)
  int parity = 0;            // kErasure: M parity rows per stripe

  int size() const { return static_cast<int>(members.size()); }
};

class GroupLayout {
 public:
  // Forms the groups for `scheme` on `topology`. Errors: scheme.ValidateFor(N).
  static Result<GroupLayout> Build(const Topology& topology, const Scheme& scheme);

  const Scheme& scheme() const { return scheme_; }
  int num_nodes() const { return static_cast<int>(group_of_.size()); }
  const std::vector<ProtectionGroup>& groups() const { return groups_; }
  const ProtectionGroup& group(int g) const { return groups_.at(g); }
  int group_of(int node) const { return group_of_.at(node); }
  int position_of(int node) const { return position_of_.at(node); }
  // The node at position `pos` (taken mod the group size) of group g.
  int MemberAt(int g, int pos) const;

  // Replica groups: the nodes other than `owner` that hold a copy of its shard, in ring
  // order (positions p+1..p+M-1). Empty for other kinds.
  std::vector<int> ReplicaHolders(int owner) const;

  // Erasure groups (see the stripe model above). Stripes and rows are group-relative.
  int ParityHolder(int g, int stripe, int parity_row) const;
  int DataRowNode(int g, int stripe, int data_row) const;
  // The stripe of group_of(owner) that holds piece `piece` (0..K'-1) of owner's shard.
  int StripeOfPiece(int owner, int piece) const;
  // Parity rows held by `node`: pairs (stripe, parity_row), in increasing stripe order.
  std::vector<std::pair<int, int>> ParityRowsHeldBy(int node) const;

  // Groups (ring: windows of `copies` consecutive nodes) that contain two nodes of one
  // rack. 0 without racks.
  int rack_conflicts() const { return rack_conflicts_; }

 private:
  explicit GroupLayout(Scheme scheme) : scheme_(scheme) {}
  void Index();

  Scheme scheme_;
  std::vector<ProtectionGroup> groups_;
  std::vector<int> group_of_;
  std::vector<int> position_of_;
  int rack_conflicts_ = 0;
};

}  // namespace memento::placement
