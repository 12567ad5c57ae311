// ProtectionLayout: how the ranks of a job map onto the placement model
// (placement/) and which regions this rank's node store holds for its peers.
//
// Built once, in Prepare, from one allgather of RankRecords:
//   - Node identities -> node indices. A node whose store survived keeps the
//     index it had when the store was written (read from its shard regions'
//     owner_node); nodes without a usable old index (fresh job, replacement
//     nodes with a new identity) fill the free indices in sorted identity
//     order. A fresh job therefore numbers nodes in sorted identity order
//     (docs/architecture.md §5), and a replacement node takes the index of the node it
//     replaces. Every old store also records the node count it was written
//     for (the "topology" region); a different node count now is
//     ElasticRestoreNeeded.
//   - Lanes are local ranks; every node must run the same number of ranks.
//   - The shard of (node, lane) is the concatenation of that rank's entries in
//     registration order; its size is known to every rank.
//   - GroupLayout over Topology::Uniform(N, lanes) (index order), and the
//     PlacementMap of this rank's lane: this rank holds, besides its entries,
//     one kReplica region per replicated owner ("replica/n<owner>", the whole
//     shard) and one kParity region per parity row ("parity/s<stripe>/r<row>",
//     P bytes; owner_node = group index, piece = stripe, owner_lane = row),
//     one kSeals region per owner it holds anything of ("seals/n<owner>",
//     entry_seals.h), and a zero-byte "topology" marker (owner_node = N, owner_lane = lanes).
//
// Thread-safety: immutable after Build. Cost: O(N * lanes + regions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memento/common/status.h"
#include "memento/placement/group_layout.h"
#include "memento/placement/placement_map.h"
#include "memento/placement/scheme.h"
#include "memento/runtime/store_layout.h"
#include "transport/wire.h"

namespace memento::runtime {

// What one rank tells the others in Prepare.
using wire::RankRecord;

// One region this rank holds for peers.
struct HeldRegion {
  placement::HeldItem item;  // kReplica or kParity
  int region = -1;           // index in the store layout
  uint64_t capacity = 0;
};

// The entry seals (entry_seals.h) of one owner that this rank keeps.
struct SealsRegion {
  int owner = -1;   // node index; same lane as this rank
  int region = -1;  // index in the store layout
  uint64_t capacity = 0;
};

class ProtectionLayout {
 public:
  // `records` indexed by world rank; `me` this rank. `entry_bytes` this rank's
  // entries. Errors: InvalidArgument (unequal ranks per node, bad scheme for
  // N), ElasticRestoreNeeded (a surviving store was written for another N).
  static Result<ProtectionLayout> Build(const std::string& scheme_text,
                                        const std::vector<RankRecord>& records, int me,
                                        const std::vector<uint64_t>& entry_bytes);

  const placement::Scheme& scheme() const { return scheme_; }
  bool protects() const { return scheme_.kind() != placement::SchemeKind::kNone; }
  int num_nodes() const { return num_nodes_; }
  int lanes() const { return lanes_; }
  int node() const { return node_; }
  int lane() const { return lane_; }
  int rank_of(int node, int lane) const { return rank_of_.at(node).at(lane); }
  // A rank's place, node * lanes + lane: it follows the node across
  // relaunches, where the world rank may not (it numbers remote rank files).
  int place_of(int node, int lane) const { return node * lanes_ + lane; }
  int place() const { return place_of(node_, lane_); }
  uint64_t shard_bytes(int node, int lane) const { return shard_bytes_.at(node).at(lane); }
  // Offset of this rank's entry `e` in its shard.
  uint64_t entry_base(int e) const { return entry_base_.at(e); }
  const placement::GroupLayout& groups() const { return *groups_; }
  // Placement map of lane `lane`.
  const placement::PlacementMap& map(int lane) const { return maps_.at(lane); }
  const std::vector<HeldRegion>& held() const { return held_; }
  // Registered entries of (node, lane).
  uint32_t entry_count(int node, int lane) const { return entry_count_.at(node).at(lane); }
  // One per owner that this rank holds anything of (replica or parity of a
  // stripe with a piece of it), by owner; see entry_seals.h.
  const std::vector<SealsRegion>& seals() const { return seals_; }
  int SealsRegionOf(int owner) const;
  // The owners (nodes, same lane) this rank holds a replica or parity of: the
  // owners of seals(), known before ExtendStoreLayout.
  std::vector<int> SealOwners() const;
  // The nodes (same lane) that keep this rank's entry seals: every node that
  // holds a replica of it or parity of a stripe with one of its pieces.
  std::vector<int> SealHolders() const;
  int topology_region() const { return topology_region_; }

  // Appends the held regions and the topology marker to `layout` (which holds
  // the shard entries) and records their indices. Only when protects().
  void ExtendStoreLayout(StoreLayout* layout);

  // The held region for a replica of `owner` / parity (stripe, row), or -1.
  int ReplicaRegion(int owner) const;
  int ParityRegion(int stripe, int row) const;

 private:
  ProtectionLayout() = default;
  placement::Scheme scheme_ = placement::Scheme::None();
  int num_nodes_ = 0;
  int lanes_ = 0;
  int node_ = 0;
  int lane_ = 0;
  std::vector<std::vector<int>> rank_of_;
  std::vector<std::vector<uint64_t>> shard_bytes_;
  std::vector<uint64_t> entry_base_;
  std::optional<placement::GroupLayout> groups_;
  std::vector<placement::PlacementMap> maps_;
  std::vector<HeldRegion> held_;
  std::vector<std::vector<uint32_t>> entry_count_;
  std::vector<SealsRegion> seals_;
  int topology_region_ = -1;
};

}  // namespace memento::runtime
