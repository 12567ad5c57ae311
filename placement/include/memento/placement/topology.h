// Topology: the nodes a job runs on, in a stable order, with their ranks and racks.
//
// Nodes are numbered 0..N-1 in the order of their sorted identities (host names or
// MEMENTO_NODE), so that the numbering survives restarts regardless of MPI rank order.
// Identities sort in natural order (NodeOrderLess): runs of digits compare by their
// value, so gpu-9 comes before gpu-10 and vm/2 before vm/10, as a host list reads.
// Each node runs `ranks` ranks ("lanes" 0..ranks-1, the local rank index). A node may name
// a rack (a higher failure domain); group formation then avoids two nodes of one rack in
// one group when the racks allow it (see group_layout.h).
//
// Thread-safety: an immutable value after construction. Cost: O(N log N) to build.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memento/common/status.h"

namespace memento::placement {

inline constexpr int kNoRack = -1;

// Natural order of node identities: a name is read as runs of digits and runs of other
// bytes; runs of other bytes compare bytewise, runs of digits by their value, and a run of
// digits before any other byte that is not a digit the way its first digit would. Names
// equal in that reading ("n01" and "n1") keep their bytewise order, so this is a strict
// total order: equal only for equal strings. O(length).
bool NodeOrderLess(std::string_view a, std::string_view b);
struct NodeOrder {
  bool operator()(std::string_view a, std::string_view b) const { return NodeOrderLess(a, b); }
};

struct NodeInfo {
  std::string identity;  // unique, non-empty: host name or MEMENTO_NODE
  int ranks = 1;         // ranks (lanes) on this node, >= 1
  int rack = kNoRack;    // rack id >= 0, or kNoRack; either every node has a rack or none
};

class Topology {
 public:
  // Validates and sorts `nodes` by identity. Errors (InvalidArgument): no nodes, an empty or
  // duplicate identity, ranks < 1, a negative rack other than kNoRack, racks on some nodes
  // but not on others.
  static Result<Topology> FromNodes(std::vector<NodeInfo> nodes);

  // N nodes named "node00000".."node<N-1>" (zero-padded to at least 5 digits and to the
  // width of N-1, so sorted order == index order),
  // each with `ranks_per_node` ranks and no racks.
  static Result<Topology> Uniform(int num_nodes, int ranks_per_node = 1);

  // As Uniform, with node i in rack floor(i * num_racks / N): num_racks contiguous blocks of
  // nodes (as neighbouring host names usually are) whose sizes differ by at most one.
  // Needs 0 <= num_racks <= num_nodes (0: no racks).
  static Result<Topology> UniformWithRacks(int num_nodes, int ranks_per_node, int num_racks);

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const NodeInfo& node(int index) const { return nodes_.at(index); }
  const std::vector<NodeInfo>& nodes() const { return nodes_; }
  int ranks(int index) const { return nodes_.at(index).ranks; }
  int rack(int index) const { return nodes_.at(index).rack; }
  bool has_racks() const { return !nodes_.empty() && nodes_[0].rack != kNoRack; }
  // Distinct rack ids in increasing order (empty without racks).
  std::vector<int> rack_ids() const;
  // Nodes of rack `rack_id` in index order.
  std::vector<int> NodesInRack(int rack_id) const;
  // True when every node has the same number of ranks (the runtime requires it).
  bool uniform_ranks() const;
  // The index of the node with this identity, if any. O(log N).
  std::optional<int> IndexOf(std::string_view identity) const;

 private:
  explicit Topology(std::vector<NodeInfo> nodes) : nodes_(std::move(nodes)) {}
  std::vector<NodeInfo> nodes_;
};

}  // namespace memento::placement
