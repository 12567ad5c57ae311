#include "memento/placement/topology.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>

namespace memento::placement {

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The value order of two runs of digits: without their leading zeros, the
// shorter is smaller, else the bytes decide. 0 when equal.
int CompareNumbers(std::string_view a, std::string_view b) {
  auto strip = [](std::string_view s) {
    size_t z = 0;
    while (z + 1 < s.size() && s[z] == '0') ++z;
    return s.substr(z);
  };
  a = strip(a);
  b = strip(b);
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b);
}

}  // namespace

bool NodeOrderLess(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (IsDigit(a[i]) && IsDigit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && IsDigit(a[ie])) ++ie;
      while (je < b.size() && IsDigit(b[je])) ++je;
      const int c = CompareNumbers(a.substr(i, ie - i), b.substr(j, je - j));
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  // A prefix comes first; names equal by value ("n01", "n1") go bytewise.
  if (i < a.size() || j < b.size()) return j < b.size();
  return a < b;
}

Result<Topology> Topology::FromNodes(std::vector<NodeInfo> nodes) {
  if (nodes.empty()) return Status::InvalidArgument("topology: no nodes");
  const bool racks = nodes[0].rack != kNoRack;
  for (const NodeInfo& n : nodes) {
    if (n.identity.empty()) return Status::InvalidArgument("topology: empty node identity");
    if (n.ranks < 1) {
      return Status::InvalidArgument("topology: node '" + n.identity + "' has " +
                                     std::to_string(n.ranks) + " ranks (need >= 1)");
    }
    if (n.rack < kNoRack) {
      return Status::InvalidArgument("topology: node '" + n.identity + "' has rack " +
                                     std::to_string(n.rack) + " (need >= 0, or none)");
    }
    if ((n.rack != kNoRack) != racks) {
      return Status::InvalidArgument("topology: node '" + n.identity +
                                     "': either every node names a rack or none does");
    }
  }
  auto by_identity = [](const NodeInfo& a, const NodeInfo& b) {
    return NodeOrderLess(a.identity, b.identity);
  };
  if (!std::is_sorted(nodes.begin(), nodes.end(), by_identity)) {
    std::sort(nodes.begin(), nodes.end(), by_identity);
  }
  for (size_t i = 1; i < nodes.size(); ++i) {
    if (nodes[i].identity == nodes[i - 1].identity) {
      return Status::InvalidArgument("topology: duplicate node identity '" + nodes[i].identity +
                                     "'");
    }
  }
  return Topology(std::move(nodes));
}

Result<Topology> Topology::Uniform(int num_nodes, int ranks_per_node) {
  return UniformWithRacks(num_nodes, ranks_per_node, 0);
}

Result<Topology> Topology::UniformWithRacks(int num_nodes, int ranks_per_node, int num_racks) {
  if (num_nodes < 1) {
    return Status::InvalidArgument("topology: " + std::to_string(num_nodes) + " nodes (need >= 1)");
  }
  if (num_racks < 0 || num_racks > num_nodes) {
    return Status::InvalidArgument("topology: " + std::to_string(num_racks) + " racks for " +
                                   std::to_string(num_nodes) + " nodes (need 0..nodes, 0: none)");
  }
  std::vector<NodeInfo> nodes(num_nodes);
  // At least 5 digits, more when N needs them, so that sorted order is index order.
  const int width = std::max(5, static_cast<int>(std::to_string(num_nodes - 1).size()));
  for (int i = 0; i < num_nodes; ++i) {
    std::string digits = std::to_string(i);
    nodes[i].identity =
        "node" + std::string(width - std::min<int>(width, digits.size()), '0') + digits;
    nodes[i].ranks = ranks_per_node;
    // Exactly num_racks blocks, whose sizes differ by at most one.
    nodes[i].rack = num_racks > 0 ? static_cast<int>(int64_t{i} * num_racks / num_nodes) : kNoRack;
  }
  return FromNodes(std::move(nodes));
}

std::vector<int> Topology::rack_ids() const {
  std::set<int> ids;
  for (const NodeInfo& n : nodes_) {
    if (n.rack != kNoRack) ids.insert(n.rack);
  }
  return {ids.begin(), ids.end()};
}

std::vector<int> Topology::NodesInRack(int rack_id) const {
  std::vector<int> out;
  for (int i = 0; i < num_nodes(); ++i) {
    if (nodes_[i].rack == rack_id) out.push_back(i);
  }
  return out;
}

bool Topology::uniform_ranks() const {
  for (const NodeInfo& n : nodes_) {
    if (n.ranks != nodes_[0].ranks) return false;
  }
  return true;
}

std::optional<int> Topology::IndexOf(std::string_view identity) const {
  auto it = std::lower_bound(
      nodes_.begin(), nodes_.end(), identity,
      [](const NodeInfo& n, std::string_view id) { return NodeOrderLess(n.identity, id); });
  if (it == nodes_.end() || it->identity != identity) return std::nullopt;
  return static_cast<int>(it - nodes_.begin());
}

}  // namespace memento::placement
